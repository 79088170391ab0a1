//! Pure model: per-thread samples in, time partition, ratios and label sets out.
//! Nothing here touches the kernel, /proc or the network; everything is unit-tested.
pub mod age;
pub mod blame;
pub mod each_other;
pub mod hist;
pub mod history;
pub mod labels;
pub mod ledger;
pub mod loss;
pub mod partition;
pub mod peaks;
pub mod stacks;
pub mod state;
pub mod stretches;
pub mod syscall_names;
pub mod syscalls;
pub mod throttle;
pub mod timeline;
