//! `strata`: a memcached-compatible cache server. Takes memcached's flags.

use strata::cli;
mod process;

use std::process::ExitCode;

use strata_server::Server;
use strata_store::SegStore;

fn main() -> ExitCode {
    let opts = match cli::parse(std::env::args_os()) {
        Ok(cli::Parsed::Run(opts)) => opts,
        Ok(cli::Parsed::Exit(code)) => return code,
        Err(e) => {
            strata_server::log_line!("strata: {}", e.message);
            strata_server::log_line!("Try 'strata -h' for the list of options.");
            return ExitCode::from(e.code);
        }
    };
    if opts.core_dumps {
        if let Err(e) = process::raise_core_limit() {
            strata_server::log_line!("strata: {e}");
            return ExitCode::from(71);
        }
    }
    let settings = opts.settings;
    // memcached-debug's `debugtime`, for memcached's own test suite
    // (crates/strata/tests/e2e/debug_clock.rs): never in production.
    if std::env::var_os("STRATA_DEBUGTIME").is_some_and(|v| v == "1") {
        strata_proto::enable_debugtime();
    }
    if let Err(e) = process::check_user(opts.user.as_deref()) {
        strata_server::log_line!("strata: {e}");
        return ExitCode::from(1);
    }
    if opts.daemonize {
        if let Err(e) = process::daemonize() {
            strata_server::log_line!("strata: failed to daemonize: {e}");
            return ExitCode::from(1);
        }
    }
    // Caught from here on, handled once the server runs: a SIGTERM while the
    // memory file loads or the listeners open (a service manager's stop
    // right after its start) stops the server cleanly instead of killing it
    // with its memory file unmarked.
    let signals = match process::catch_signals() {
        Ok(signals) => signals,
        Err(e) => {
            strata_server::log_line!("strata: could not install signal handlers: {e}");
            return ExitCode::from(1);
        }
    };
    // Listeners, event loops, wakers, the memory file: memcached reserves 20
    // plus a few per thread.
    process::raise_open_files(settings.max_connections, 32 + 4 * settings.threads);
    if opts.lock_memory {
        // memcached warns and goes on when mlockall fails.
        if let Err(e) = process::lock_memory() {
            strata_server::log_line!("warning: -k invalid, mlockall() failed: {e}");
        }
    }
    // -o handover: the running process stops and writes its memory file
    // back before this one opens it; its sockets become this one's.
    if let Some(path) = &settings.handover {
        // What could fail once the old process has stopped: the TLS
        // certificates load.
        let check = || match &settings.tls {
            Some(tls) => strata_server::tls::TlsState::new(tls.clone(), 0).map(drop),
            None => Ok(()),
        };
        match strata_server::handover::take_over(path, &settings, check) {
            Ok(None) => {}
            Ok(Some(t)) => strata_server::log_line!(
                "strata: handover: took {} listeners and {} connections over from the previous process ({} ms)",
                t.listeners,
                t.conns,
                t.waited.as_millis()
            ),
            Err(e) => {
                strata_server::log_line!("strata: handover from {}: {e}", path.display());
                return ExitCode::from(1);
            }
        }
    }
    let config = settings.engine_config();
    let mut engine = match &settings.memory_file {
        None => SegStore::new(config),
        Some(path) => match SegStore::open_file(config, path, settings.restart_strict) {
            Ok((engine, line)) => {
                strata_server::log_line!("strata: {line}");
                engine
            }
            Err(e) => {
                strata_server::log_line!("strata: memory file {}: {e}", path.display());
                return ExitCode::from(1);
            }
        },
    };
    if settings.ext.enabled() {
        // A file the CLI's checks passed can still be refused by the engine
        // (fewer than two pages, a page size it does not take): exit 2,
        // the file is what is wrong.
        match engine.attach_flash(settings.ext.clone()) {
            Ok(line) => strata_server::log_line!("strata: {line}"),
            Err(e) => {
                strata_server::log_line!("strata: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let verbose = settings.verbose;
    let server = match Server::start(settings, Box::new(engine)) {
        Ok(server) => server,
        // -Z's certificates and options (memcached's ssl_init: EX_USAGE).
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            strata_server::log_line!("strata: {e}");
            return ExitCode::from(64);
        }
        Err(e) => {
            strata_server::log_line!("strata: failed to listen: {e}");
            return ExitCode::from(1);
        }
    };
    if let Err(e) = process::drop_privileges(opts.user.as_deref()) {
        strata_server::log_line!("strata: {e}");
        server.shutdown();
        server.wait();
        return ExitCode::from(1);
    }
    if let Some(path) = &opts.pid_file {
        if let Err(e) = std::fs::write(path, format!("{}\n", std::process::id())) {
            strata_server::log_line!("strata: could not write pid file {}: {e}", path.display());
        }
    }
    let engine = match server.runtime.core.io_engine {
        strata_server::settings::IoEngine::Uring => "io_uring",
        _ => "epoll",
    };
    strata_server::log_line!("strata: io engine: {engine}");
    if verbose > 0 {
        for addr in &server.tcp_addrs {
            strata_server::log_line!("strata: listening on {addr}");
        }
        if let Some(addr) = server.metrics_addr {
            strata_server::log_line!("strata: metrics on http://{addr}/metrics");
        }
    }
    if let Err(e) = process::stop_on_signals(signals, server.runtime.clone()) {
        strata_server::log_line!("strata: could not start the signal thread: {e}");
        return ExitCode::from(1);
    }
    let runtime = server.runtime.clone();
    server.wait();
    // Every stop that gets here is clean: the memory file is written back
    // and marked so (a crash skips this; recovery then checks every item),
    // and a handover's connections and journal are passed on.
    let _ = runtime.close();
    if let Some(path) = &opts.pid_file {
        let _ = std::fs::remove_file(path);
    }
    ExitCode::SUCCESS
}
