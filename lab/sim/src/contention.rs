//! An optional shared CPU budget for the simulated lab's delayed behaviours (issue 17, item 2): a model of
//! kind creates and rollouts that run at once on one machine and compete for its cores. Off by default;
//! the latency benchmark (`benches/reset_sim.rs`) turns it on for its contention-aware figures.
//!
//! The model is processor sharing. A delayed behaviour that has a CPU demand is a job: its delay is how
//! long it takes alone, and while it runs it wants `demand` cores. With jobs wanting `D` cores in all on a
//! machine of `C` cores, every job progresses at `min(1, C / D)` of its own speed: nobody is slowed while
//! the machine has room, and everyone is slowed alike once it has not. With a demand of one core per job
//! that is `min(1, C / k)` for `k` jobs at once. Behaviours without a demand keep their delay as a plain
//! wait (API round trips, propagation).
//!
//! What it leaves out, so its figures are still a lower bound: the idle load of the clusters already up
//! (each control plane keeps using some CPU after its create), memory pressure, and the network shared by
//! image pulls (pulls are charged as CPU, with the rollout they belong to).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::faults::Behaviour;

/// A machine's cores and what each delayed behaviour wants of them (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
pub struct Contention {
    /// Cores of the machine the lab runs on.
    pub cores: f64,
    /// Cores a behaviour's delay keeps busy while it runs alone. Behaviours not listed use none.
    pub demand: BTreeMap<Behaviour, f64>,
}

impl Contention {
    /// A machine of `cores` cores on which nothing has a demand yet.
    pub fn cores(cores: f64) -> Self {
        Contention {
            cores,
            demand: BTreeMap::new(),
        }
    }

    /// `b`'s delay keeps `cores` cores busy while it runs alone.
    #[must_use]
    pub fn demand(mut self, b: Behaviour, cores: f64) -> Self {
        self.demand.insert(b, cores);
        self
    }
}

/// Below this many seconds of work left, a job is done (the clock's millisecond ticks round the rest).
const DONE: f64 = 1e-6;

struct Job {
    /// Seconds the job would still take alone.
    left: f64,
    demand: f64,
}

struct Jobs {
    cores: f64,
    running: HashMap<u64, Job>,
    next_id: u64,
    /// When `left` of every running job was last brought up to date.
    at: Instant,
}

impl Jobs {
    /// How fast every running job progresses now: seconds of its own work per second.
    fn speed(&self) -> f64 {
        let wanted: f64 = self.running.values().map(|j| j.demand).sum();
        if wanted <= self.cores {
            1.0
        } else {
            self.cores / wanted
        }
    }

    /// Charges the time since the last change to every running job, at the speed it had.
    fn advance(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        if dt > 0.0 {
            let speed = self.speed();
            for j in self.running.values_mut() {
                j.left -= dt * speed;
            }
        }
        self.at = now;
    }
}

/// The shared budget: jobs run through [`Cpu::run`]; every start and end wakes the others to
/// recompute when they finish.
pub(crate) struct Cpu {
    pub config: Contention,
    jobs: Mutex<Jobs>,
    changed: watch::Sender<u64>,
}

impl Cpu {
    pub fn new(config: Contention) -> Arc<Self> {
        Arc::new(Cpu {
            jobs: Mutex::new(Jobs {
                cores: config.cores.max(f64::MIN_POSITIVE),
                running: HashMap::new(),
                next_id: 0,
                at: Instant::now(),
            }),
            config,
            changed: watch::Sender::new(0),
        })
    }

    /// The cores `b` wants while it runs, if it takes part.
    pub fn demand(&self, b: Behaviour) -> Option<f64> {
        self.config.demand.get(&b).copied().filter(|d| *d > 0.0)
    }

    /// A job that takes `alone` when it has the machine to itself and wants `demand` cores: returns when
    /// its work is done, in Tokio time.
    pub async fn run(&self, demand: f64, alone: Duration) {
        let mut changes = self.changed.subscribe();
        let id = {
            let mut jobs = self.lock();
            jobs.advance(Instant::now());
            let id = jobs.next_id;
            jobs.next_id += 1;
            jobs.running.insert(
                id,
                Job {
                    left: alone.as_secs_f64(),
                    demand,
                },
            );
            id
        };
        self.changed.send_modify(|g| *g += 1);
        changes.mark_unchanged();
        loop {
            let finish = {
                let mut jobs = self.lock();
                let now = Instant::now();
                jobs.advance(now);
                let left = jobs.running[&id].left;
                if left <= DONE {
                    jobs.running.remove(&id);
                    None
                } else {
                    // Rounded up to the next millisecond, Tokio's timer tick, so the job is done on waking
                    // (less a hair, so that float noise does not add a millisecond).
                    let ms = (left / jobs.speed() * 1000.0 - 1e-6).ceil().max(1.0);
                    Some(now + Duration::from_millis(ms as u64))
                }
            };
            let Some(finish) = finish else {
                self.changed.send_modify(|g| *g += 1);
                return;
            };
            tokio::select! {
                () = tokio::time::sleep_until(finish) => {}
                r = changes.changed() => {
                    if r.is_err() {
                        return;
                    }
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Jobs> {
        self.jobs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(cores: f64) -> Arc<Cpu> {
        Cpu::new(Contention::cores(cores).demand(Behaviour::KindCreate, 1.0))
    }

    /// Starts `n` jobs of `alone` at `after` each; returns when each finished, from the start.
    async fn finishes(cpu: &Arc<Cpu>, jobs: &[(Duration, f64, Duration)]) -> Vec<Duration> {
        let t0 = Instant::now();
        let handles: Vec<_> = jobs
            .iter()
            .map(|&(after, demand, alone)| {
                let cpu = cpu.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(after).await;
                    cpu.run(demand, alone).await;
                    t0.elapsed()
                })
            })
            .collect();
        let mut out = Vec::new();
        for h in handles {
            out.push(h.await.unwrap());
        }
        out
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[tokio::test(start_paused = true)]
    async fn jobs_that_fit_the_cores_take_their_time_alone() {
        let cpu = cpu(4.0);
        let t = finishes(&cpu, &[(secs(0), 1.0, secs(60)); 4]).await;
        assert_eq!(t, vec![secs(60); 4]);
    }

    #[tokio::test(start_paused = true)]
    async fn eight_one_core_jobs_on_four_cores_take_twice_as_long() {
        let cpu = cpu(4.0);
        let t = finishes(&cpu, &[(secs(0), 1.0, secs(60)); 8]).await;
        assert_eq!(t, vec![secs(120); 8]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_job_that_starts_later_slows_the_others_only_while_they_overlap() {
        // Four one-core jobs of 60 s on 2 cores run at half speed; the fifth, started at 60 s when each
        // of the four has 30 s left, makes it 2/5 speed: the four end at 60 + 30 / 0.4 = 135 s, and
        // the fifth, with 60 - 75 × 0.4 = 30 s left, alone then, at 165 s.
        let cpu = cpu(2.0);
        let mut jobs = vec![(secs(0), 1.0, secs(60)); 4];
        jobs.push((secs(60), 1.0, secs(60)));
        let t = finishes(&cpu, &jobs).await;
        assert_eq!(t, [secs(135), secs(135), secs(135), secs(135), secs(165)]);
    }

    #[tokio::test(start_paused = true)]
    async fn demands_add_up_in_cores_not_in_jobs() {
        // Two jobs of half a core each and one of two cores fit 3 cores: none is slowed.
        let cpu = cpu(3.0);
        let t = finishes(
            &cpu,
            &[
                (secs(0), 0.5, secs(10)),
                (secs(0), 0.5, secs(20)),
                (secs(0), 2.0, secs(30)),
            ],
        )
        .await;
        assert_eq!(t, [secs(10), secs(20), secs(30)]);
    }
}
