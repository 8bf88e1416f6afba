//! Which worker takes a new connection.
//!
//! memcached hands connections to its workers in turn. Strata does too
//! unless its workers are pinned one to a CPU (`-o pin_threads`, or on its
//! own when the process may use exactly `-t` CPUs: `server.rs`); then a
//! connection goes to the worker pinned to the CPU its packets arrive on
//! (the socket's `SO_INCOMING_CPU`: where the kernel ran the receive path
//! of the handshake, so the NIC queue's CPU for a remote client, the
//! client's own CPU on loopback):
//!
//! ```text
//!   client thread / NIC queue on CPU 1 ──► packets processed on CPU 1
//!        │                                      │ wakes the worker: on CPU 1,
//!        ▼                                      ▼ no cross-CPU wake-up (IPI)
//!   SO_INCOMING_CPU = 1 ──► worker pinned to CPU 1 ──► its reply wakes the
//!                                                      client on CPU 1 too
//! ```
//!
//! Every request then wakes its worker, and every reply its reader, on the
//! CPU already running the other side: no inter-processor interrupt, no
//! migration, the socket's lines in one core's caches. With the load
//! sharing the server's two cores, 48-key multi-gets at `-t 2` went from
//! ~104k to ~134k a second (docs/bench/wire.md, session 20).
//!
//! Balance still comes first: a worker takes a steered connection only
//! while it has been handed at most [`slack`] more than the least-handed
//! worker; past that, or for a CPU no worker is pinned to, the connection
//! goes to the least-handed worker. So however the packets arrive (one NIC
//! queue, one client thread opening every connection) the counts stay
//! within a few connections and a quarter of each other, as memcached's
//! rotation keeps them within one.

/// The acceptor's choice of worker for each new connection.
pub struct Steering {
    /// The worker pinned to each CPU (index: CPU number), if any.
    owner: Vec<Option<usize>>,
    /// Connections handed to each worker so far.
    handed: Vec<u64>,
    /// The rotation used while no worker is pinned.
    next: usize,
}

/// How far a steered worker may run ahead of the least-handed one: two
/// connections, and a quarter of that worker's count beyond.
pub fn slack(least: u64) -> u64 {
    2 + least / 4
}

impl Steering {
    /// `pinned[i]` is worker `i`'s CPU; empty when the workers float
    /// (connections are then handed in turn, as memcached does).
    pub fn new(workers: usize, pinned: &[usize]) -> Steering {
        let mut owner = Vec::new();
        for (worker, &cpu) in pinned.iter().enumerate().take(workers) {
            if owner.len() <= cpu {
                owner.resize(cpu + 1, None);
            }
            owner[cpu].get_or_insert(worker);
        }
        Steering { owner, handed: vec![0; workers.max(1)], next: 0 }
    }

    /// Whether connections are steered (some worker is pinned).
    pub fn steering(&self) -> bool {
        !self.owner.is_empty()
    }

    /// The worker for a connection whose packets arrive on `incoming_cpu`,
    /// and whether it is that CPU's worker (a steered connection).
    pub fn pick(&mut self, incoming_cpu: Option<usize>) -> (usize, bool) {
        if !self.steering() {
            let worker = self.next % self.handed.len();
            self.next = self.next.wrapping_add(1);
            self.handed[worker] += 1;
            return (worker, false);
        }
        let least = (0..self.handed.len()).min_by_key(|&w| self.handed[w]).unwrap_or(0);
        let own = incoming_cpu.and_then(|cpu| self.owner.get(cpu).copied().flatten());
        let (worker, steered) = match own {
            Some(w) if self.handed[w] <= self.handed[least] + slack(self.handed[least]) => (w, true),
            _ => (least, false),
        };
        self.handed[worker] += 1;
        (worker, steered)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floating_workers_take_connections_in_turn() {
        let mut s = Steering::new(3, &[]);
        assert!(!s.steering());
        let picks: Vec<usize> = (0..7).map(|i| s.pick(Some(i % 2)).0).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn each_cpus_connections_go_to_its_worker() {
        // Two client threads, on CPUs 0 and 1, interleaving their connects.
        let mut s = Steering::new(2, &[0, 1]);
        for i in 0..32 {
            let cpu = i % 2;
            assert_eq!(s.pick(Some(cpu)), (cpu, true), "connection {i}");
        }
        // Uneven bursts within the slack stay with their CPU's worker.
        let mut s = Steering::new(2, &[4, 6]);
        for cpu in [4, 4, 4, 6, 6, 6, 4, 6] {
            assert_eq!(s.pick(Some(cpu)), (usize::from(cpu == 6), true));
        }
    }

    #[test]
    fn one_cpu_for_every_connection_still_spreads_them() {
        let mut s = Steering::new(4, &[0, 1, 2, 3]);
        for n in 1..=1000u64 {
            s.pick(Some(2));
            let (least, most) = (*s.handed.iter().min().unwrap(), *s.handed.iter().max().unwrap());
            assert!(most <= least + slack(least) + 1, "after {n}: {:?}", s.handed);
        }
        assert!(s.handed[2] > s.handed[0], "the CPU's own worker leads: {:?}", s.handed);
    }

    #[test]
    fn an_unknown_cpu_goes_to_the_least_handed_worker() {
        let mut s = Steering::new(2, &[0, 1]);
        assert_eq!(s.pick(Some(0)), (0, true));
        assert_eq!(s.pick(Some(7)), (1, false), "no worker on CPU 7");
        assert_eq!(s.pick(None), (0, false), "unknown: the least handed (ties: the first)");
        assert_eq!(s.pick(Some(1)), (1, true));
    }

    #[test]
    fn workers_sharing_a_cpu_steer_to_the_first() {
        // -o pin_threads with more workers than CPUs wraps around.
        let mut s = Steering::new(3, &[0, 1, 0]);
        assert_eq!(s.pick(Some(0)), (0, true));
        assert_eq!(s.pick(Some(1)), (1, true));
        assert_eq!(s.pick(Some(5)), (2, false));
    }
}
