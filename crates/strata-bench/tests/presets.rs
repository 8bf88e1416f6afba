//! Runs every workload preset for a second against a server this test
//! starts, through the real `strata-bench` binary with `--json`, and checks
//! that the counts add up and that no reply failed validation. Then a short
//! sweep and a one-round compare check that they write what they promise.
//!
//! The server command comes from `STRATA_BENCH_SERVER`, a template with
//! `{port}` (TCP, and UDP on the same port for the `udp` preset); the
//! default is the `strata` binary of this build (`target/<profile>/strata`,
//! built by `cargo build --workspace`); scripts/test also runs it against
//! Debian's memcached. A preset whose protocol the server does not speak
//! (the bench exits 3 after its probe) is skipped with the reason printed.

use serde_json::Value;
use std::process::Command;
use std::sync::Mutex;
use strata_bench::server::Server;

static SERIAL: Mutex<()> = Mutex::new(());

fn template() -> String {
    std::env::var("STRATA_BENCH_SERVER").unwrap_or_else(|_| {
        // This test runs from target/<profile>/deps/; strata is built next door.
        let exe = std::env::current_exe().expect("test binary path");
        let strata = exe.parent().and_then(|deps| deps.parent()).expect("target dir").join("strata");
        assert!(
            strata.exists(),
            "{} not built: run `cargo build -p strata` first, or set STRATA_BENCH_SERVER",
            strata.display()
        );
        format!("{} -p {{port}} -U {{port}} -l 127.0.0.1 -t 1", strata.display())
    })
}

fn bench(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_strata-bench")).args(args).output().expect("run strata-bench");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

fn n(r: &Value, field: &str) -> u64 {
    r[field].as_u64().unwrap_or_else(|| panic!("no {field} in {r}"))
}

fn check_report(preset: &str, r: &Value) {
    let (sent, requests) = (n(r, "sent"), n(r, "requests"));
    assert!(requests > 0, "{preset}: nothing completed: {r}");
    assert_eq!(sent, requests + n(r, "aborted") + n(r, "timed_out"), "{preset}: sent != completed + aborted + timed out");
    assert_eq!(n(r, "gets") + n(r, "sets"), requests, "{preset}");
    assert_eq!(n(r, "hits") + n(r, "misses"), n(r, "keys_requested"), "{preset}");
    assert_eq!(n(r, "keys_requested"), n(r, "gets") * n(r, "mget"), "{preset}");
    assert!(n(r, "hits") > 0, "{preset}: no hits");
    let errors = r["errors"].as_object().expect("errors map");
    for kind in ["bad_reply", "value_mismatch", "unexpected_reply", "client_error", "closed", "connect"] {
        assert!(!errors.contains_key(kind), "{preset}: {kind} errors: {errors:?}");
    }
    // Lost datagrams and an out-of-memory refusal are the server's right,
    // but must stay rare.
    let tolerated = errors.get("timeout").and_then(Value::as_u64).unwrap_or(0)
        + errors.get("server_error").and_then(Value::as_u64).unwrap_or(0);
    assert!(tolerated * 100 <= sent, "{preset}: {tolerated} timeouts/server errors of {sent}");
    assert!(r["latency"]["p99_us"].as_f64().unwrap() > 0.0);
}

#[test]
fn every_preset_runs_clean_against_a_real_server() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::start(&template(), None).expect("start the server under test");
    let addr = server.addr().to_string();
    let dir = std::env::temp_dir().join(format!("strata-bench-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut ran = Vec::new();
    for preset in strata_bench::preset::NAMES {
        let json = dir.join(format!("{preset}.json"));
        let json_arg = json.to_str().unwrap();
        let (code, stdout, stderr) =
            bench(&["run", "--server", &addr, "--preset", preset, "--duration", "1s", "--quiet", "--json", json_arg]);
        if code == 3 && matches!(preset, "memtier-binary" | "udp") {
            println!("skipping {preset}: {}", stderr.trim());
            continue;
        }
        assert_eq!(code, 0, "{preset} exited {code}\n{stdout}\n{stderr}");
        let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        check_report(preset, &report);
        println!("{preset}: {:.0} req/s, p99 {} µs", report["throughput_rps"].as_f64().unwrap(), report["latency"]["p99_us"]);
        ran.push(preset);
    }
    assert!(ran.len() >= 5, "only {ran:?} ran");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn sweep_and_compare_write_their_results() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("strata-bench-sweep-{}", std::process::id()));
    let out = dir.to_str().unwrap().to_string();
    {
        let server = Server::start(&template(), None).expect("start the server under test");
        let addr = server.addr().to_string();
        let args = ["sweep", "--server", &addr, "--preset", "latency", "--rates", "2000,5000", "--step-duration", "500ms", "--out", &out];
        let (code, stdout, stderr) = bench(&args);
        assert_eq!(code, 0, "{stdout}\n{stderr}");
        let sweep: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("sweep.json")).unwrap()).unwrap();
        let steps = sweep["steps"].as_array().unwrap();
        assert_eq!(steps.len(), 2);
        for step in steps {
            check_report("sweep step", step);
        }
        let svg = std::fs::read_to_string(dir.join("sweep.svg")).unwrap();
        assert!(svg.starts_with("<svg") && svg.matches("<polyline").count() == 3);
        assert!(std::fs::read_to_string(dir.join("sweep.md")).unwrap().lines().count() == 4);
    }
    let t = template();
    let json = dir.join("compare.json");
    let args = ["compare", "--a", &t, "--b", &t, "--rounds", "1", "--preset", "memaslap", "--conns", "8", "--duration", "500ms"];
    let (code, stdout, stderr) = bench(&[&args[..], &["--json", json.to_str().unwrap()]].concat());
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("| server CPU µs/request |"), "{stdout}");
    let c: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let runs = c["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for run in runs {
        check_report("compare", &run["report"]);
        assert!(run["cpu_us_per_request"].as_f64().unwrap() > 0.0, "no CPU time read: {run}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// `--prefill-conns` sets every key once over several connections and
/// threads; `--requests` stops after that many; `--key-offset` asks for
/// keys the prefill never set, which miss.
#[test]
fn parallel_prefill_request_budget_and_key_offset() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::start(&template(), None).expect("start the server under test");
    let addr = server.addr().to_string();
    let common = ["run", "--server", &addr, "--key-size", "20", "--value-size", "64", "--get-ratio", "1", "--conns", "4", "--quiet", "--json", "-"];
    let json = |extra: &[&str]| -> Value {
        let (code, stdout, stderr) = bench(&[&common[..], extra].concat());
        assert_eq!(code, 0, "{extra:?}\n{stdout}\n{stderr}");
        serde_json::from_str(&stdout).unwrap()
    };
    let r = json(&["--keys", "20001", "--prefill-conns", "5", "--threads", "2", "--requests", "3000", "--duration", "30s"]);
    check_report("prefill", &r);
    assert_eq!((n(&r, "prefill_keys"), n(&r, "requests"), n(&r, "hits")), (20_001, 3000, 3000), "{r}");
    assert!(r["prefill_s"].as_f64().unwrap() > 0.0);
    assert!(r["elapsed_s"].as_f64().unwrap() < 20.0, "the budget did not end the run: {r}");
    let r = json(&["--keys", "1000", "--key-offset", "20001", "--no-prefill", "--requests", "700", "--duration", "30s"]);
    assert_eq!((n(&r, "requests"), n(&r, "hits"), n(&r, "misses"), n(&r, "error_total")), (700, 0, 700, 0), "{r}");
    assert_eq!(n(&r, "prefill_keys"), 0);
}
