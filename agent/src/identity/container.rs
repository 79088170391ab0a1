//! Which container a process runs in, from its cgroup path alone: the path
//! every container runtime and cgroup driver gives its containers names the
//! container's ID, and a pod's path names the pod's UID. Pure parsers, fed
//! from `/proc/PID/cgroup`; the shapes they read (docs/deployment.md,
//! "Which pod is that?"):
//!
//! | runtime, driver | path of a container's processes |
//! | --- | --- |
//! | kubelet, cgroupfs (v1, v2) | `/kubepods/burstable/pod<uid>/<id>` (no QoS level for guaranteed pods) |
//! | kubelet, systemd, containerd | `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid, _ for ->.slice/cri-containerd-<id>.scope` |
//! | kubelet, systemd, CRI-O | `…/kubepods-besteffort-pod<uid>.slice/crio-<id>.scope` (its `crio-conmon-<id>.scope` is the runtime's monitor, outside the container); with crun, one level deeper: `…/crio-<id>.scope/container` |
//! | kubelet, cgroupfs, CRI-O | `/kubepods/besteffort/pod<uid>/crio-<id>` |
//! | kubelet, systemd, cri-dockerd | `…/docker-<id>.scope` |
//! | Docker, cgroupfs / systemd | `/docker/<id>`, `/system.slice/docker-<id>.scope` |
//! | Podman | `/machine.slice/libpod-<id>.scope` (rootless: under `user.slice`), cgroupfs `/libpod_parent/libpod-<id>`; `libpod-conmon-<id>.scope` is outside |
//! | containerd without kubelet (nerdctl, ctr) | `/<containerd namespace>/<id>`, `/system.slice/nerdctl-<id>.scope` |
//!
//! An ID is 64 lowercase hex digits; a path is read as untrusted text (a
//! process names its own cgroup only through the runtime, but a cgroup
//! delegated to it can be named anything): nothing else makes an ID.
//! Read from inside a cgroup namespace the path is relative to the reader's
//! root (`/../../kubepods-…/cri-containerd-<id>.scope`): the same segments,
//! read the same way.

/// A process' container, as its cgroup path names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Container {
    /// the runtime's 64-hex-digit container ID
    pub id: String,
    /// the runtime the path names: "containerd", "crio", "docker", "podman",
    /// or "unknown" (a bare ID: kubelet's cgroupfs driver does not say)
    pub runtime: &'static str,
    /// the UID of its Kubernetes pod, when the path is under `kubepods`
    pub pod_uid: Option<String>,
}

/// Where a process runs: its cgroup path and the container that path names
/// (None: a process outside any container, a host process).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// the path the container was read from, else the unified (v2) path,
    /// else the first v1 path that is not the root ("" when unreadable)
    pub cgroup: String,
    pub container: Option<Container>,
}

impl Placement {
    /// The label value of a process outside any container.
    pub const HOST: &'static str = "host";

    /// `runtime` label: the container's runtime, or "host".
    pub fn runtime(&self) -> &'static str {
        self.container.as_ref().map_or(Self::HOST, |c| c.runtime)
    }

    pub fn container_id(&self) -> &str {
        self.container.as_ref().map_or("", |c| c.id.as_str())
    }

    /// The first 12 digits of the ID, as `docker ps` and `crictl ps` show it.
    pub fn short_id(&self) -> Option<&str> {
        self.container.as_ref().map(|c| &c.id[..12])
    }
}

fn is_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The container one path segment names: (runtime, ID), or None.
fn segment_container(seg: &str) -> Option<(&'static str, &str)> {
    if is_id(seg) {
        return Some(("unknown", seg));
    }
    // systemd's scope units, and the cgroupfs driver's same names without the suffix (CRI-O's
    // `<pod>/crio-<id>`, Podman's `/libpod_parent/libpod-<id>`)
    let unit = seg.strip_suffix(".scope").unwrap_or(seg);
    // the runtimes' monitors (`crio-conmon-`, `libpod-conmon-`) run outside the container
    const PREFIXES: [(&str, &str); 5] =
        [("cri-containerd-", "containerd"), ("crio-", "crio"), ("docker-", "docker"), ("libpod-", "podman"), ("nerdctl-", "containerd")];
    PREFIXES.iter().find_map(|(prefix, runtime)| unit.strip_prefix(prefix).filter(|id| is_id(id)).map(|id| (*runtime, id)))
}

/// The pod UID a segment names: `pod<uid>` (cgroupfs) or
/// `kubepods[-<qos>]-pod<uid with _ for ->.slice` (systemd).
fn segment_pod_uid(seg: &str) -> Option<String> {
    let uid = match seg.strip_suffix(".slice") {
        Some(unit) if unit.starts_with("kubepods") => unit.rsplit_once("-pod")?.1,
        Some(_) => return None,
        None => seg.strip_prefix("pod")?,
    };
    // a UUID (36) or a static pod's hash (32 hex digits)
    let ok = (32..=36).contains(&uid.len()) && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-' || b == b'_');
    ok.then(|| uid.replace('_', "-").to_ascii_lowercase())
}

/// The container a cgroup path names: the deepest segment that names one
/// (a container in a container is the inner one), with the pod UID of a
/// segment above it.
pub fn from_path(path: &str) -> Option<Container> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty() && *s != "..").collect();
    let (at, (runtime, id)) = segs.iter().enumerate().rev().find_map(|(i, s)| Some((i, segment_container(s)?)))?;
    let pod_uid = segs[..at].iter().rev().find_map(|s| segment_pod_uid(s)).filter(|_| segs[..at].iter().any(|s| s.starts_with("kubepods")));
    Some(Container { id: id.to_string(), runtime, pod_uid })
}

/// A process' placement from its `/proc/PID/cgroup`: the unified line first,
/// then the v1 lines in order; the first path that names a container wins.
pub fn from_proc_cgroup(text: &str) -> Placement {
    let mut paths: Vec<&str> = vec![];
    for line in text.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(id), Some(ctrls), Some(path)) = (f.next(), f.next(), f.next()) else { continue };
        if id == "0" && ctrls.is_empty() {
            paths.insert(0, path);
        } else {
            paths.push(path);
        }
    }
    for p in &paths {
        if let Some(c) = from_path(p) {
            return Placement { cgroup: p.to_string(), container: Some(c) };
        }
    }
    let cgroup = paths.iter().find(|p| **p != "/").or(paths.first()).map_or(String::new(), |p| p.to_string());
    Placement { cgroup, container: None }
}

/// Process `pid`'s placement (None: its cgroup file could not be read).
pub fn of_process(pid: u32) -> Option<Placement> {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok().map(|t| from_proc_cgroup(&t))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4f0c8cf3a5e3d2b1c0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7";
    const UID: &str = "8d2e7f4a-1b3c-4d5e-9f60-718293a4b5c6";

    fn c(runtime: &'static str, pod: bool) -> Option<Container> {
        Some(Container { id: ID.into(), runtime, pod_uid: pod.then(|| UID.to_string()) })
    }

    #[test]
    fn every_runtime_and_driver() {
        let u = UID.replace('-', "_");
        let cases = [
            (format!("/kubepods/burstable/pod{UID}/{ID}"), c("unknown", true)),
            (format!("/kubepods/pod{UID}/{ID}"), c("unknown", true)),
            (format!("/kubepods/besteffort/pod{UID}/{ID}"), c("unknown", true)),
            (
                format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{ID}.scope"),
                c("containerd", true),
            ),
            (format!("/kubepods.slice/kubepods-pod{u}.slice/cri-containerd-{ID}.scope"), c("containerd", true)),
            (format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/crio-{ID}.scope"), c("crio", true)),
            // CRI-O on cgroup v2 runs the container's processes in a child named container
            (
                format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/crio-{ID}.scope/container"),
                c("crio", true),
            ),
            (format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/docker-{ID}.scope"), c("docker", true)),
            (format!("/kubepods/besteffort/pod{UID}/crio-{ID}"), c("crio", true)),
            (format!("/libpod_parent/libpod-{ID}"), c("podman", false)),
            (format!("/docker/{ID}"), c("unknown", false)),
            (format!("/system.slice/docker-{ID}.scope"), c("docker", false)),
            (format!("/machine.slice/libpod-{ID}.scope"), c("podman", false)),
            (format!("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope/container"), c("podman", false)),
            (format!("/default/{ID}"), c("unknown", false)),
            (format!("/system.slice/nerdctl-{ID}.scope"), c("containerd", false)),
            // read from inside a cgroup namespace
            (format!("/../../kubepods-besteffort-pod{u}.slice/cri-containerd-{ID}.scope"), c("containerd", true)),
            (format!("/../{ID}"), c("unknown", false)),
        ];
        for (path, want) in cases {
            assert_eq!(from_path(&path), want, "{path}");
        }
    }

    #[test]
    fn monitors_hosts_and_lookalikes_are_no_container() {
        let u = UID.replace('-', "_");
        for path in [
            format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/crio-conmon-{ID}.scope"),
            format!("/machine.slice/libpod-conmon-{ID}.scope"),
            format!("/kubepods/besteffort/pod{UID}/crio-conmon-{ID}"),
            "/system.slice/nginx.service".to_string(),
            "/user.slice/user-0.slice/session-3.scope".to_string(),
            "/".to_string(),
            String::new(),
            // this sandbox's own memory cgroup: 32 hex digits are no container ID
            "/process_api/aa10dd720ad0efd2cae0a8710f885908".to_string(),
            format!("/docker/{}", ID.to_uppercase()),
            format!("/docker/{}0", ID),
            format!("/system.slice/docker-{}.scope", &ID[..63]),
            format!("/system.slice/evil-{ID}.scope"),
        ] {
            assert_eq!(from_path(&path), None, "{path}");
        }
    }

    #[test]
    fn a_static_pods_uid_is_its_hash_and_a_pod_uid_needs_kubepods() {
        let hash = "0f1e2d3c4b5a69788796a5b4c3d2e1f0";
        let p = from_path(&format!("/kubepods/burstable/pod{hash}/{ID}")).unwrap();
        assert_eq!(p.pod_uid.as_deref(), Some(hash));
        // a pod-like segment outside kubepods names no pod
        assert_eq!(from_path(&format!("/pod{UID}/{ID}")).unwrap().pod_uid, None);
        // the deepest container wins (a container in a container)
        let inner = "a".repeat(64);
        assert_eq!(from_path(&format!("/docker/{ID}/docker/{inner}")).unwrap().id, inner);
    }

    #[test]
    fn the_unified_line_first_then_the_first_v1_line_that_names_one() {
        let hybrid = format!(
            "12:pids:/kubepods/burstable/pod{UID}/{ID}\n5:cpu,cpuacct:/kubepods/burstable/pod{UID}/{ID}\n1:name=systemd:/kubepods/burstable/pod{UID}/{ID}\n0::/\n"
        );
        let p = from_proc_cgroup(&hybrid);
        assert_eq!(p.container, c("unknown", true));
        assert_eq!(p.cgroup, format!("/kubepods/burstable/pod{UID}/{ID}"));
        let v2 = format!("0::/system.slice/docker-{ID}.scope\n");
        assert_eq!(from_proc_cgroup(&v2).runtime(), "docker");
        let host = "0::/system.slice/nginx.service\n";
        let p = from_proc_cgroup(host);
        assert_eq!((p.runtime(), p.container_id(), p.cgroup.as_str()), ("host", "", "/system.slice/nginx.service"));
        // this machine's layout: the root everywhere but memory
        let here = "9:name=systemd:/\n4:memory:/process_api/aa10dd720ad0efd2cae0a8710f885908\n1:cpu:/\n0::/\n";
        let p = from_proc_cgroup(here);
        assert_eq!((p.runtime(), p.cgroup.as_str()), ("host", "/process_api/aa10dd720ad0efd2cae0a8710f885908"));
        assert_eq!(from_proc_cgroup("garbage\n\n::\n").runtime(), "host");
        assert_eq!(p.short_id(), None);
        assert_eq!(from_proc_cgroup(&v2).short_id(), Some(&ID[..12]));
    }
}
