//! A thread that does, in order, the work the run loop hands it: what would hold the loop up
//! (rendering a timeline view takes a few hundred ms of a busy process) is done here from data the
//! loop took, so that the loop goes back to answering scrapes at once (issue 54: six clients
//! asking for views left room for 4 scrapes in 30 s). The work comes from requests the endpoint
//! already bounds (`export::http`: at most a few wait at once), so the queue needs no bound of
//! its own.
use std::sync::mpsc;

type Job = Box<dyn FnOnce() + Send>;

pub struct Worker {
    jobs: mpsc::Sender<Job>,
}

impl Worker {
    /// Start the thread, named `name`.
    pub fn start(name: &str) -> std::io::Result<Worker> {
        let (jobs, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new().name(name.into()).spawn(move || {
            for job in rx {
                // a job that panics (a bug: its reply is dropped, the client is answered 503) does
                // not take the jobs after it down with the thread
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
                    log::error!("a render failed (a bug: please report it with the log above); its request was answered 503");
                }
            }
        })?;
        Ok(Worker { jobs })
    }

    /// Do `job` on the thread, after what was handed it before. The thread outlives every job (a
    /// panic is caught); were it gone, `job` is dropped, and with it the reply it carries: its
    /// request is answered 503, as for a job that panicked.
    pub fn run(&self, job: impl FnOnce() + Send + 'static) {
        if self.jobs.send(Box::new(job)).is_err() {
            log::error!("the render thread is gone: a view or a profile is not made (a bug: please report it)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_run_in_order_off_the_callers_thread() {
        let w = Worker::start("test-worker").unwrap();
        let (tx, rx) = mpsc::channel();
        let caller = std::thread::current().id();
        for i in 0..3 {
            let tx = tx.clone();
            w.run(move || tx.send((i, std::thread::current().id() != caller)).unwrap());
        }
        let got: Vec<_> = (0..3).map(|_| rx.recv().unwrap()).collect();
        assert_eq!(got, [(0, true), (1, true), (2, true)]);
        // a job that panics: the next is still done
        w.run(|| panic!("a bug in a render"));
        w.run(move || tx.send((3, true)).unwrap());
        assert_eq!(rx.recv_timeout(std::time::Duration::from_secs(5)).unwrap(), (3, true));
    }
}
