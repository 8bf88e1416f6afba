//! Server start-up and the acceptor thread.
//!
//! ```text
//!            acceptor thread (listeners, clock tick, shutdown)
//!               │ round-robin hand-off: channel + waker
//!     ┌─────────┼─────────┐
//!  worker 0  worker 1 … worker N-1   each: own epoll loop, own connections
//!     └─────────┴─────────┘
//!               engine (shared; per-key atomic, no global lock)
//! ```
//!
//! The acceptor also enforces `-c`: past the limit a new connection gets
//! memcached's "ERROR Too many open connections" and is closed.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use mio::{Events, Poll, Token, Waker};
use strata_store::{Clock, Engine};

use crate::auth::Auth;
use crate::core::Core;
use crate::new_conn::NewConn;
use crate::runtime::{Runtime, Started};
use crate::settings::{IoEngine, Settings};
use crate::stats::WorkerStats;
use crate::sys::uring::{EventFd, Ring};
use crate::sys::{self, Listener, Stream};
use crate::worker::Worker;
use crate::worker_uring::UringWorker;

const ACCEPTOR_WAKE: Token = Token(usize::MAX);

/// A running server.
pub struct Server {
    pub runtime: Arc<Runtime>,
    /// The TCP addresses actually bound (port 0 resolved).
    pub tcp_addrs: Vec<SocketAddr>,
    /// The UDP addresses bound (`-U`), one per listen address.
    pub udp_addrs: Vec<SocketAddr>,
    /// The `/metrics` address bound (`-o metrics_listen`, port 0 resolved).
    pub metrics_addr: Option<SocketAddr>,
    threads: Vec<JoinHandle<()>>,
}

impl Server {
    /// Bind every listener and start the workers and the acceptor.
    pub fn start(mut settings: Settings, engine: Box<dyn Engine>) -> io::Result<Server> {
        // -Z: certificates and options are checked before anything is bound.
        let tls = match &settings.tls {
            Some(tls) => Some(crate::tls::TlsState::new(tls.clone(), 0).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?),
            None => None,
        };
        if tls.as_ref().is_some_and(|t| !t.has_peer_config()) && settings.tcp_listen_tls.contains(&crate::tls::ListenTls::Peer) {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "an mtls: listener needs -o ssl_ca_cert (the CAs client certificates are verified against)"));
        }

        // Before listening: a restored cache drops what went stale meanwhile.
        let warm = crate::journal::warm::before_listening(&settings, &*engine);
        let mut listeners = Vec::new();
        if let Some(path) = &settings.unix_socket {
            listeners.push(sys::unix_listener(path, settings.unix_mask, settings.backlog)?);
        } else if settings.tcp_enabled {
            for addr in &settings.tcp_listen {
                // Taken over from the previous process (`handover/`), or bound.
                match crate::handover::incoming::listener(*addr) {
                    Some(listener) => listeners.push(listener),
                    None => listeners.push(sys::tcp_listener(*addr, settings.backlog)?),
                }
            }
        }
        let tcp_addrs: Vec<SocketAddr> = listeners.iter().filter_map(Listener::local_addr).collect();
        let handover_fds = match settings.handover {
            Some(_) => listeners.iter().map(Listener::try_clone_fd).collect::<io::Result<Vec<_>>>()?,
            None => Vec::new(),
        };
        let (udp_addrs, mut udp_sockets) = udp_sockets(&settings, settings.threads.max(1))?;
        let metrics = settings.metrics_listen.map(crate::report::metrics_http::bind).transpose()?;
        let metrics_addr = metrics.as_ref().map(std::net::TcpListener::local_addr).transpose()?;
        // `stats settings` shows the address bound (port 0 resolved).
        settings.metrics_listen = metrics_addr;
        mark_sockets(settings.tunables.sock_cookie_id, &listeners, &udp_sockets);
        if let (Some(path), None) = (&settings.port_file, &settings.unix_socket) {
            if let Err(e) = crate::port_file::write(path, &tcp_addrs, &udp_addrs) {
                crate::log_line!("strata: failed to write the port file {}: {e}", path.display());
            }
        }
        let auth = Auth::load(&settings)?;
        let io_engine = resolve_io_engine(settings.io_engine)?;
        let clock = engine.clock_origin().map_or_else(Clock::new, Clock::resuming);
        if let Some(tls) = &tls {
            tls.last_refresh.store(clock.now(), std::sync::atomic::Ordering::Relaxed);
        }
        // Listener i's TLS mode (the unix socket, if any, is plain).
        let listen_tls: Vec<crate::tls::ListenTls> = if settings.unix_socket.is_some() {
            vec![crate::tls::ListenTls::Off; listeners.len()]
        } else {
            (0..listeners.len()).map(|i| settings.tcp_listen_tls.get(i).copied().unwrap_or_default()).collect()
        };
        // Workers pinned one to a CPU (and connections steered: steer.rs)
        // when asked, or when the process may use exactly one CPU a worker.
        let workers = settings.threads.max(1);
        // Unknown (the call failed): not pinned, as before the option existed.
        let allowed = crate::sys::affinity::allowed_cpus().unwrap_or_default();
        let pinned = !allowed.is_empty() && settings.pin_threads.unwrap_or(allowed.len() == workers);
        settings.pin_threads = Some(pinned);
        let cpus: Vec<usize> = if pinned { (0..workers).map(|i| allowed[i % allowed.len()]).collect() } else { Vec::new() };
        let core = Core::new(settings, engine, clock, io_engine);
        let shared = Arc::new(Runtime::build(core, Started { auth, tls, warm }));
        shared.warm.after_listening(&shared.core);
        crate::ops::conns::register_sockets(&shared.core, &tcp_addrs, &udp_addrs);

        let mut threads = Vec::new();
        let mut hand_off: Vec<(Sender<NewConn>, Wake)> = Vec::new();
        let engine = shared.core.io_engine;
        let steering = crate::steer::Steering::new(workers, &cpus);
        for index in 0..workers {
            let (tx, rx) = channel();
            let udp = std::mem::take(&mut udp_sockets[index]);
            let name = format!("strata-worker-{index}");
            let cpu = cpus.get(index).copied();
            let verbose = shared.core.settings.verbose > 0;
            let pin = move || {
                if let Some(cpu) = cpu {
                    match crate::sys::affinity::pin_current_thread(cpu) {
                        Ok(()) if verbose => crate::log_line!("strata: worker {index} pinned to CPU {cpu}"),
                        Ok(()) => {}
                        Err(e) => crate::log_line!("strata: could not pin worker {index} to CPU {cpu}: {e}"),
                    }
                }
            };
            let wake: Wake = match engine {
                IoEngine::Uring => {
                    let eventfd = Arc::new(EventFd::new()?);
                    let (started_tx, started) = channel();
                    let (worker_shared, worker_wake) = (shared.clone(), eventfd.clone());
                    threads.push(std::thread::Builder::new().name(name).spawn(move || {
                        pin();
                        match UringWorker::new(worker_shared, index, rx, udp, worker_wake) {
                            Ok(worker) => {
                                let _ = started_tx.send(Ok(()));
                                worker.run();
                            }
                            Err(e) => {
                                let _ = started_tx.send(Err(e));
                            }
                        }
                    })?);
                    started.recv().map_err(|_| io::Error::other("worker thread died"))??;
                    Arc::new(move || eventfd.wake())
                }
                _ => {
                    let (worker, waker) = Worker::new(shared.clone(), index, rx, udp)?;
                    threads.push(std::thread::Builder::new().name(name).spawn(move || {
                        pin();
                        worker.run()
                    })?);
                    Arc::new(move || {
                        let _ = waker.wake();
                    })
                }
            };
            let on_stop = wake.clone();
            shared.core.on_shutdown(Box::new(move || on_stop()));
            hand_off.push((tx, wake));
        }

        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), ACCEPTOR_WAKE)?);
        shared.core.on_shutdown(Box::new(move || {
            let _ = waker.wake();
        }));
        for (i, listener) in listeners.iter_mut().enumerate() {
            listener.register(poll.registry(), Token(i))?;
        }
        for new in crate::handover::incoming::conns() {
            shared.core.curr_connections.fetch_add(1, Ordering::Relaxed);
            let (tx, wake) = &hand_off[new.stream.raw_fd() as usize % hand_off.len()];
            if tx.send(new).is_ok() {
                wake();
            }
        }
        let acceptor_shared = shared.clone();
        let acceptor = std::thread::Builder::new()
            .name("strata-acceptor".into())
            .spawn(move || accept_loop(acceptor_shared, poll, listeners, listen_tls, hand_off, steering))?;
        threads.push(acceptor);
        threads.extend(shared.flash.start(&shared.core)?);
        threads.extend(crate::memory::start(&shared.core, shared.memory.as_ref())?);
        if let Some(listener) = metrics {
            threads.push(crate::report::metrics_http::start(&shared, listener)?);
        }
        if let Some(path) = &shared.core.settings.handover {
            crate::handover::outgoing::serve(&shared.core, &shared.handover, path, handover_fds)?;
        }
        Ok(Server { runtime: shared, tcp_addrs, udp_addrs, metrics_addr, threads })
    }

    /// Wait until shutdown has been requested and every thread has finished.
    pub fn wait(self) {
        for thread in self.threads {
            let _ = thread.join();
        }
    }

    /// Ask the server to stop (as SIGTERM does).
    pub fn shutdown(&self) {
        self.runtime.core.request_shutdown();
    }
}

/// One UDP socket per worker per listen address (none without `-U` or with
/// `-s`). With port 0 the first bind picks the port and the rest reuse it.
fn udp_sockets(settings: &Settings, workers: usize) -> io::Result<(Vec<SocketAddr>, Vec<Vec<mio::net::UdpSocket>>)> {
    let mut per_worker: Vec<Vec<mio::net::UdpSocket>> = (0..workers).map(|_| Vec::new()).collect();
    let mut addrs = Vec::new();
    if !settings.udp_enabled || settings.unix_socket.is_some() {
        return Ok((addrs, per_worker));
    }
    for tcp in &settings.tcp_listen {
        let mut addr = SocketAddr::new(tcp.ip(), settings.udp_port);
        for sockets in per_worker.iter_mut() {
            let socket = sys::udp_socket(addr)?;
            addr = socket.local_addr()?;
            sockets.push(socket);
        }
        addrs.push(addr);
    }
    Ok((addrs, per_worker))
}

/// `-o sock_cookie_id`: mark every TCP listener and UDP socket (0: none).
fn mark_sockets(mark: u32, listeners: &[Listener], udp: &[Vec<mio::net::UdpSocket>]) {
    use std::os::fd::AsFd;
    if mark == 0 {
        return;
    }
    for listener in listeners {
        if let Listener::Tcp(l, _) = listener {
            sys::set_mark(l.as_fd(), mark);
        }
    }
    for socket in udp.iter().flatten() {
        sys::set_mark(socket.as_fd(), mark);
    }
}

/// Wakes one worker (its mio waker or its ring's eventfd).
type Wake = Arc<dyn Fn() + Send + Sync>;

/// Pick the I/O engine: `auto` tries io_uring and falls back to epoll.
fn resolve_io_engine(choice: IoEngine) -> io::Result<IoEngine> {
    match choice {
        IoEngine::Epoll => Ok(IoEngine::Epoll),
        IoEngine::Uring => {
            Ring::probe().map_err(|e| io::Error::new(e.kind(), format!("io_engine=uring unavailable: {e}")))?;
            Ok(IoEngine::Uring)
        }
        IoEngine::Auto => match Ring::probe() {
            Ok(()) => Ok(IoEngine::Uring),
            Err(e) => {
                crate::log_line!("strata: io_uring unavailable ({e}); using epoll");
                Ok(IoEngine::Epoll)
            }
        },
    }
}

fn accept_loop(
    rt: Arc<Runtime>,
    mut poll: Poll,
    listeners: Vec<Listener>,
    listen_tls: Vec<crate::tls::ListenTls>,
    hand_off: Vec<(Sender<NewConn>, Wake)>,
    mut steering: crate::steer::Steering,
) {
    let mut events = Events::with_capacity(64);
    let shared = &rt.core;
    let stats = &shared.worker_stats[0];
    let mut maintained = 0;
    loop {
        shared.clock.tick();
        let now = shared.clock.now();
        if now != maintained {
            // Once a second: reclaim expired segments with no request's help,
            // while the LRU crawler (memcached's background reclaimer) is on.
            shared.engine.maintain(now, rt.ops.crawler.enabled());
            rt.journal.tick(strata_store::clock::unix_time());

            crate::ops::mrc::tick(rt.ops.mrc.as_ref(), shared);
            maintained = now;
        }
        if shared.is_shutting_down() {
            break;
        }
        if let Err(e) = poll.poll(&mut events, Some(Duration::from_millis(100))) {
            if e.kind() != io::ErrorKind::Interrupted {
                crate::log_line!("strata: acceptor poll failed: {e}");
                break;
            }
        }
        for event in events.iter() {
            let Some(listener) = listeners.get(event.token().0) else { continue };
            loop {
                let (stream, peer, listen) = match listener.accept() {
                    Ok(accepted) => accepted,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        // EMFILE and friends: back off instead of spinning.
                        crate::log_line!("strata: accept failed: {e}");
                        std::thread::sleep(Duration::from_millis(10));
                        break;
                    }
                };
                let open = shared.curr_connections.load(Ordering::Relaxed) as usize;
                if open >= shared.settings.max_connections {
                    reject(stream);
                    WorkerStats::incr(&stats.rejected_connections);
                    continue;
                }
                shared.curr_connections.fetch_add(1, Ordering::Relaxed);
                let incoming_cpu = steering.steering().then(|| stream.incoming_cpu()).flatten();
                let (worker, steered) = steering.pick(incoming_cpu);
                if steered {
                    WorkerStats::incr(&stats.steered_connections);
                }
                let (tx, wake) = &hand_off[worker % hand_off.len()];
                let tls = listen_tls.get(event.token().0).copied().unwrap_or_default();
                if tx.send(NewConn { stream, peer, listen, tls, resume: None }).is_ok() {
                    wake();
                }
            }
        }
    }
    rt.handover.acceptor_stopped();
    for listener in &listeners {
        if !rt.handover.is_active() {
            listener.cleanup();
        }
    }
}

/// memcached's `maxconns_fast` answer to a connection past `-c`.
fn reject(mut stream: Stream) {
    let _ = stream.write(b"ERROR Too many open connections\r\n");
}
