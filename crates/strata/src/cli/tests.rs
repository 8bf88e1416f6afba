//! The command line's unit tests: what each flag sets, and the message and
//! exit code of each refusal (the binary's own tests start servers).

use std::time::Duration;

use super::*;

fn run(args: &[&str]) -> Result<Settings, CliError> {
    let args = std::iter::once("strata").chain(args.iter().copied()).map(OsString::from);
    match parse(args)? {
        Parsed::Run(o) => Ok(o.settings),
        Parsed::Exit(_) => Err(CliError::new(0, "exit")),
    }
}

fn refused(args: &[&str]) -> (u8, String) {
    match run(args) {
        Ok(_) => panic!("{args:?} was accepted"),
        Err(e) => (e.code, e.message),
    }
}

#[test]
fn memcached_flags() {
    let s = run(&["-p", "2000", "-m", "128", "-c", "10", "-t", "2", "-I", "2m", "-vv", "-o", "idle_timeout=5"]).unwrap();
    assert_eq!(s.tcp_listen, vec!["127.0.0.1:2000".parse().unwrap()]);
    assert_eq!(s.memory_limit_bytes, 128 << 20);
    assert_eq!(s.item_size_max, 2 << 20);
    assert_eq!(s.verbose, 2);
    assert_eq!(s.idle_timeout, Some(Duration::from_secs(5)));
    let s = run(&["--port=3000", "-l", "0.0.0.0,::1", "-I", "512k"]).unwrap();
    assert_eq!(s.tcp_listen.len(), 2);
    assert_eq!(s.tcp_listen[1], "[::1]:3000".parse().unwrap());
    assert_eq!(s.item_size_max, 512 << 10);
}

#[test]
fn flags_that_shape_settings() {
    let s = run(&["-f", "1.5", "-n", "64", "-D", "/", "-X", "-W", "-o", "track_sizes,no_lru_crawler,lru_crawler_sleep=50,lru_crawler_tocrawl=7"]).unwrap();
    assert_eq!(s.slabs.growth_factor, 1.5);
    assert_eq!(s.slabs.min_size_bytes, 64);
    assert_eq!((s.detail_delimiter, s.detail_enabled), (b'/', true));
    assert!(!s.dumps_enabled && !s.watch_enabled && s.track_sizes && !s.lru_crawler);
    assert_eq!((s.lru_crawler_sleep_us, s.lru_crawler_tocrawl), (50, 7));
    let s = run(&["-o", "slab_chunk_max=16,slab_sizes=96-192-384"]).unwrap();
    assert_eq!(s.slabs.chunk_max_bytes, 16 << 10);
    assert_eq!(s.slabs.sizes, Some(vec![96, 192, 384]));
    assert_eq!(run(&[]).unwrap().slabs.chunk_max_bytes, 512 << 10);
    assert_eq!(run(&["-o", "no_chunked_items"]).unwrap().slabs.chunk_max_bytes, 1 << 20);
    let s = run(&["-o", "no_modern"]).unwrap();
    assert!(!s.maxconns_fast && !s.lru_crawler && s.tunables.slab_automove == 0);
    let s = run(&["-o", "hashpower=20,slab_automove=2,slab_automove_ratio=0.5,slab_automove_window=30,hash_algorithm=xxh3"]).unwrap();
    assert_eq!((s.tunables.hashpower_init, s.tunables.slab_automove, s.tunables.slab_automove_window), (20, 2, 30));
    let s = run(&["-N", "2", "-o", "read_buf_mem_limit=1,worker_logbuf_size=8,temporary_ttl=30"]).unwrap();
    assert_eq!((s.tunables.napi_ids, s.tunables.read_buf_mem_limit_bytes, s.tunables.worker_logbuf_bytes), (2, 1 << 20, 8 << 10));
    assert!(s.tunables.temp_lru);
}

#[test]
fn ports_as_memcached_reads_them() {
    let s = run(&["-p", "-1"]).unwrap();
    assert!(s.tcp_enabled);
    assert_eq!(s.tcp_listen[0].port(), 0);
    let s = run(&["-p", "0", "-U", "5000"]).unwrap();
    assert!(!s.tcp_enabled && s.udp_enabled);
    let s = run(&["-U", "5001"]).unwrap();
    assert_eq!((s.tcp_port, s.udp_port), (5001, 5001), "-U alone moves TCP to the same port");
    let s = run(&["-U", "-1"]).unwrap();
    assert!(s.udp_enabled && s.tcp_enabled);
    assert_eq!((s.tcp_port, s.udp_port), (0, 0));
    assert_eq!(refused(&["-p", "70000"]), (64, "ERROR: Invalid port number 70000.".into()));
}

#[test]
fn refusals_carry_memcached_messages_and_codes() {
    let cases: &[(&[&str], u8, &str)] = &[
        (&["-x"], 1, "invalid option -- 'x'"),
        (&["--bogus"], 1, "unrecognized option '--bogus'"),
        (&["-c", "0"], 1, "Maximum connections must be greater than 0"),
        (&["-R", "0"], 1, "Number of requests per event must be greater than 0"),
        (&["-t", "0"], 1, "Number of threads must be greater than 0"),
        (&["-f", "1.0"], 1, "Factor must be greater than 1"),
        (&["-f", "abc"], 1, "Factor must be greater than 1"),
        (&["-n", "0"], 1, "Chunk size must be greater than 0"),
        (&["-D", ""], 1, "No delimiter specified"),
        (&["-N", "0"], 1, "Maximum number of NAPI IDs must be greater than 0"),
        (&["-N", "8", "-t", "4"], 64, "Number of napi_ids(8) cannot be greater than number of threads(4)"),
        (&["-I", "100"], 64, "Item max size cannot be less than 1024 bytes."),
        (&["-I", "64m"], 64, "Cannot set item size limit higher than 1/2 of memory max."),
        (&["-I", "2g", "-m", "8g"], 64, "Cannot set item size limit higher than a gigabyte."),
        (&["-B", "foo"], 64, "Invalid value for binding protocol: foo\n -- should be one of auto, binary, or ascii"),
        (&["-Z", "-p", "0"], 64, "ERROR: You cannot enable SSL without a TCP port."),
        (&["-o", "ssl_verify_mode=9"], 1, "Invalid ssl_verify_mode. Use help to see valid options."),
        (&["-o", "ssl_verify_mode=x"], 1, "could not parse argument to ssl_verify_mode"),
        (&["-o", "ssl_min_version=4"], 1, "Invalid ssl_min_version. Use help to see valid options."),
        (&["-o", "ssl_wbuf_size"], 1, "Missing ssl_wbuf_size argument"),
        (&["-o", "ssl_chain_cert"], 1, "Missing ssl_chain_cert argument"),
        (&["-o", "bogus"], 1, "Illegal suboption \"bogus\""),
        (&["-o", "ssl_bogus=k"], 1, "Illegal suboption \"ssl_bogus=k\""),
        (&["-o", "proxy_config=c"], 1, "Illegal suboption \"proxy_config=c\": the proxy is not part of Strata"),
        (&["-o", "ext_path=/x"], 1, "must supply size to ext_path, ie: ext_path=/f/e:64m (M|G|T|P supported)\nfailed to parse ext_path argument"),
        (&["-o", "ext_path=/x:64k"], 1, "must supply size to ext_path, ie: ext_path=/f/e:64m (m|g|t|p supported)\nfailed to parse ext_path argument"),
        (&["-o", "ext_path=/x:64m:hot"], 1, "Unknown extstore bucket: hot\nfailed to parse ext_path argument"),
        (&["-o", "ext_path="], 1, "failed to parse ext_path argument"),
        (&["-o", "ext_path"], 1, "missing argument to ext_path, ie: ext_path=/d/file:5G"),
        (&["-o", "ext_threads"], 1, "Missing ext_threads argument"),
        (&["-o", "ext_threads=abc"], 1, "could not parse argument to ext_threads"),
        (&["-o", "ext_item_size=-1"], 1, "could not parse argument to ext_item_size"),
        (&["-o", "ext_max_frag=abc"], 1, "could not parse argument to ext_max_frag"),
        (&["-o", "ext_bogus=1"], 1, "Illegal suboption \"ext_bogus=1\""),
        (&["-o", "ext_wbuf_size=0,ext_path=/x:64m"], 64, "-I (item_size_max: 1048576) cannot be larger than ext_wbuf_size: 0"),
        (&["-U", "5", "-o", "ext_path=/x:64m"], 64, "Cannot use UDP with extstore enabled (-U 0 to disable)"),
        (&["-o", "ext_page_size=6,ext_path=/x:64m"], 1, "Failed to initialize external storage: page_size must be divisible by wbuf_size"),
        (&["-o", "ext_page_size=3,ext_wbuf_size=1,ext_path=/x:64m"], 1, "Failed to initialize external storage: page_size and wbuf_size must be divisible by 1024*1024*2"),
        (&["-o", "ext_page_size=0,ext_path=/x:64m"], 1, "Failed to initialize external storage: ext_page_size must be at least 2 (megabytes)"),
        (&["-o", "ext_page_size=2,ext_wbuf_size=2,ext_path=/x:128g"], 1, "Failed to initialize external storage: page_count must total to < 65536. Increase page_size or lower path sizes"),
        (&["-o", "ext_threads=0,ext_path=/x:64m"], 1, "Failed to initialize external storage: ext_threads must be at least 1"),
        (&["-o", "hashpower=5"], 1, "Initial hashtable multiplier of 5 is too low"),
        (&["-o", "hashpower"], 1, "Missing numeric argument for hashpower"),
        (&["-o", "slab_chunk_max=2000"], 1, "slab_chunk_max must be specified in kilobytes."),
        (&["-o", "slab_chunk_max=0"], 1, "slab_chunk_max must be >= 0"),
        (&["-o", "slab_chunk_max=x"], 1, "could not parse argument to slab_chunk_max"),
        (&["-I", "512k", "-o", "slab_chunk_max=1024"], 64, "slab_chunk_max (bytes: 1048576) cannot be larger than -I (item_size_max 524288)"),
        (&["-o", "slab_chunk_max=3"], 64, "-I (item_size_max: 1048576) must be evenly divisible by slab_chunk_max (bytes: 3072)"),
        (&["-o", "slab_sizes=100-90"], 64, "slab size 90 cannot be lower than or equal to a previous class size"),
        (&["-o", "slab_automove=3"], 1, "slab_automove must be between 0 and 2"),
        (&["-o", "slab_automove_ratio=2"], 1, "slab_automove_ratio must be > 0 and < 1"),
        (&["-o", "slab_automove_window=2"], 1, "slab_automove_window must be > 2 and < 1800"),
        (&["-o", "tail_repair_time=5"], 1, "Cannot set tail_repair_time to less than 10 seconds"),
        (&["-o", "hash_algorithm=md5"], 1, "Unknown hash_algorithm option (jenkins, murmur3, xxh3)"),
        (&["-o", "lru_crawler_sleep=2000000"], 1, "LRU crawler sleep must be between 0 and 1 second"),
        (&["-o", "lru_crawler_tocrawl=-1"], 1, "lru_crawler_tocrawl takes a numeric 32bit value"),
        (&["-o", "hot_lru_pct=80"], 1, "hot_lru_pct must be > 1 and < 80"),
        (&["-o", "hot_lru_pct=50,warm_lru_pct=40"], 64, "hot_lru_pct + warm_lru_pct cannot be more than 80% combined"),
        (&["-o", "warm_max_factor=0"], 1, "warm_max_factor must be > 0"),
        (&["-o", "no_lru_maintainer,temporary_ttl=5"], 64, "temporary_ttl requires lru_maintainer to be enabled"),
        (&["-o", "watcher_logbuf_size=x"], 1, "could not parse argument to watcher_logbuf_size"),
        (&["-o", "read_buf_mem_limit"], 1, "Missing read_buf_mem_limit argument"),
        (&["-S", "-B", "ascii"], 64, "ERROR: You cannot allow the ASCII protocol while using SASL."),
        (&["-S", "-U", "5"], 64, "ERROR: Cannot enable UDP while using binary SASL authentication."),
        (&["-Y", "f", "-B", "binary"], 64, "ERROR: You cannot allow the BINARY protocol while using ascii authentication tokens."),
        (&["-Y", "f", "-U", "5"], 64, "Cannot use UDP with ascii authentication enabled (-U 0 to disable)"),
    ];
    for (args, code, message) in cases {
        assert_eq!(refused(args), (*code, message.to_string()), "{args:?}");
    }
    assert!(run(&["-l", "nowhere"]).is_err());
    assert!(run(&["-p", "notaport"]).is_err());
}

#[test]
fn extstore_options() {
    let dir = std::env::temp_dir().join(format!("strata-cli-ext-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("flash");
    let path = format!("ext_path={}:64m", file.display());
    let s = run(&["-o", &path]).unwrap();
    assert!(s.ext.enabled() && file.exists(), "the file is created at start, as memcached does");
    let ext = &s.ext;
    let load = |a: &std::sync::atomic::AtomicU32| a.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!((ext.page_size_bytes, ext.wbuf_size_bytes, ext.threads, ext.io_depth), (64 << 20, 4 << 20, 1, 1));
    let t = &ext.tunables;
    assert_eq!((load(&t.item_size), load(&t.item_age), load(&t.recache_rate), t.max_frag()), (64, u32::MAX, 2000, 0.8), "ext_item_size defaults to 64 (memcached: 512)");
    assert_eq!((load(&t.compact_under), load(&t.drop_under)), (0, 0), "filled in by the engine from its pages");
    let opts = format!(
        "ext_page_size=8,ext_wbuf_size=2,ext_threads=3,ext_io_depth=4,ext_item_size=100,ext_item_age=60,ext_low_ttl=5,\
         ext_recache_rate=10,ext_max_sleep=7,ext_max_frag=0.5,ext_drop_unread,{path}:compact,{path}"
    );
    let s = run(&["-I", "2m", "-o", &opts]).unwrap();
    let ext = &s.ext;
    assert_eq!((ext.page_size_bytes, ext.wbuf_size_bytes, ext.threads, ext.io_depth), (8 << 20, 2 << 20, 3, 4));
    let t = &ext.tunables;
    assert_eq!((load(&t.item_size), load(&t.item_age), load(&t.low_ttl), load(&t.recache_rate)), (100, 60, 5, 10));
    assert_eq!((load(&t.max_sleep), t.max_frag(), t.drop_unread.load(std::sync::atomic::Ordering::Relaxed)), (7, 0.5, true));
    assert_eq!(ext.paths.len(), 2);
    assert_eq!(ext.paths[0].bucket, strata_store::ExtBucket::Compact);
    let s = run(&["-o", &format!("ext_compact_under=3,ext_drop_under=9,{path}")]).unwrap();
    assert_eq!((load(&s.ext.tunables.compact_under), load(&s.ext.tunables.drop_under)), (3, 9));
    // The file: a directory, a missing directory, no room on the device.
    let (code, message) = refused(&["-o", &format!("ext_path={}:64m", dir.display())]);
    assert_eq!(code, 2);
    assert!(message.contains("Is a directory"), "{message}");
    let (code, message) = refused(&["-o", &format!("ext_path={}/none/f:64m", dir.display())]);
    assert_eq!(code, 2);
    assert!(message.contains("cannot open it for reading and writing"), "{message}");
    let (code, message) = refused(&["-o", &format!("ext_path={}:1m", file.display())]);
    assert_eq!(code, 2);
    assert!(message.contains("supplied ext_path has zero size"), "{message}");
    let (code, message) = refused(&["-o", &format!("ext_page_size=1024,ext_path={}:32t", dir.join("huge").display())]);
    assert_eq!(code, 2);
    assert!(message.contains("free on its device"), "{message}");
    assert!(!dir.join("huge").exists(), "a file the start created is removed when refused");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_memcached_suboption_without_a_value_is_accepted() {
    for opt in [
        "maxconns_fast", "no_maxconns_fast", "no_hashexpand", "slab_reassign", "no_slab_reassign", "slab_automove",
        "no_slab_automove", "lru_crawler", "no_lru_crawler", "lru_maintainer", "no_lru_maintainer", "track_sizes",
        "inline_ascii_resp", "no_inline_ascii_resp", "modern", "no_modern", "no_chunked_items", "drop_privileges",
        "no_drop_privileges", "resp_obj_mem_limit", "sock_cookie_id=3", "relaxed_privileges",
    ] {
        assert!(run(&["-o", opt]).is_ok(), "-o {opt}");
    }
}

#[test]
fn metrics_listen() {
    assert_eq!(run(&[]).unwrap().metrics_listen, None);
    let s = run(&["-o", "metrics_listen=127.0.0.1:9150"]).unwrap();
    assert_eq!(s.metrics_listen, Some("127.0.0.1:9150".parse().unwrap()));
    let s = run(&["-o", "metrics_listen=[::1]:9150"]).unwrap();
    assert_eq!(s.metrics_listen, Some("[::1]:9150".parse().unwrap()));
    let s = run(&["-o", "metrics_listen=localhost:0"]).unwrap();
    assert_eq!(s.metrics_listen, Some("127.0.0.1:0".parse().unwrap()));
    assert_eq!(refused(&["-o", "metrics_listen"]), (1, "Missing metrics_listen argument (ADDR:PORT)".to_string()));
    for bad in ["9150", "127.0.0.1", "127.0.0.1:65536", "::1:9150", "localhost:x", "host.example:9150"] {
        let (code, message) = refused(&["-o", &format!("metrics_listen={bad}")]);
        assert_eq!((code, message), (1, format!("metrics_listen must be ADDR:PORT, not '{bad}'")));
    }
}

#[test]
fn request_stats_are_on_unless_switched_off() {
    let s = run(&[]).unwrap();
    assert_eq!((s.latency_stats, s.hotkeys), (true, true));
    let s = run(&["-o", "no_latency_stats"]).unwrap();
    assert_eq!((s.latency_stats, s.hotkeys), (false, true));
    let s = run(&["-o", "no_hotkeys,no_latency_stats"]).unwrap();
    assert_eq!((s.latency_stats, s.hotkeys), (false, false));
}

#[test]
fn memory_auto_and_pressure_yield() {
    let s = run(&["-m", "auto"]).unwrap();
    let g = s.memory_governor.clone().expect("a governor");
    assert!(g.auto);
    assert_eq!(s.memory_limit_bytes, g.max_limit_bytes);
    assert!(s.memory_limit_bytes >= 8 << 20);
    let s = run(&["-m", "100", "-o", "memory_pressure_yield"]).unwrap();
    let g = s.memory_governor.clone().expect("a governor");
    assert!(!g.auto);
    assert_eq!(g.max_limit_bytes, 100 << 20);
    assert!(run(&["-m", "100"]).unwrap().memory_governor.is_none(), "no governor by default");
    let (code, message) = refused(&["-m", "auto", "-e", "/tmp/strata-memauto-refused"]);
    assert_eq!(code, 1);
    assert!(message.contains("-m auto cannot be used with -e"), "{message}");
    let (code, message) = refused(&["-e", "/tmp/strata-memauto-refused", "-o", "memory_pressure_yield"]);
    assert_eq!(code, 1);
    assert!(message.contains("memory_pressure_yield cannot be used with -e"), "{message}");
    let (code, message) = refused(&["-m", "lots"]);
    assert_eq!(code, 1);
    assert!(message.contains("a number of megabytes or auto"), "{message}");
}

#[test]
fn the_journal_is_sized_to_the_memory_limit_unless_given() {
    assert_eq!(run(&[]).unwrap().warm.journal_entries, 1 << 17, "-m 64: 1 MiB of slots");
    assert_eq!(run(&["-m", "1024"]).unwrap().warm.journal_entries, 1 << 19);
    assert_eq!(run(&["-o", "journal_size=524288"]).unwrap().warm.journal_entries, 1 << 19, "given: kept");
    assert_eq!(run(&["-m", "1024", "-o", "journal_size=0"]).unwrap().warm.journal_entries, 0, "off stays off");
}
