//! Who a process is beyond its PID: the container its cgroup names
//! (`container`), and in Kubernetes the namespace, pod and container the
//! node's pod list names for that container (`pods`, fetched by `source`).
//! Read once per process (its cgroup) and per scrape from the last list:
//! never a fetch on a scrape's path.
pub mod container;
mod pod_list;
pub mod pods;
pub mod source;

pub use container::Placement;
use pods::{Names, PodNames};

/// A process' identity for its series and profiles.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    pub placement: Placement,
    /// its names in the pod list: by its container's ID, else by its pod's
    /// UID (a container newer than the list: no container name yet)
    pub names: Option<Names>,
}

impl Identity {
    pub fn resolve(placement: &Placement, list: &PodNames) -> Identity {
        let names = placement.container.as_ref().and_then(|c| list.container(&c.id).or_else(|| list.pod(c.pod_uid.as_deref()?))).cloned();
        Identity { placement: placement.clone(), names }
    }

    /// A container of a pod the list does not name by its ID: its ID, to fetch the list again for.
    pub fn wants_names(&self) -> Option<&str> {
        let c = self.placement.container.as_ref().filter(|c| c.pod_uid.is_some())?;
        self.names.as_ref().is_none_or(|n| n.container.is_empty()).then_some(c.id.as_str())
    }

    /// The labels of `waitmeter_process_info` beyond `pid` and `comm`, the
    /// empty ones left out (a host process: `runtime="host"` and its cgroup).
    pub fn labels(&self) -> Vec<(&'static str, String)> {
        let p = &self.placement;
        let placed = [
            ("cgroup", p.cgroup.clone()),
            ("runtime", p.runtime().to_string()),
            ("container_id", p.container_id().to_string()),
            ("pod_uid", p.container.as_ref().and_then(|c| c.pod_uid.clone()).unwrap_or_default()),
        ];
        let mut labels: Vec<_> = placed.into_iter().filter(|(_, v)| !v.is_empty()).collect();
        labels.extend(self.pod_labels());
        labels.extend(self.names.as_ref().map(|n| ("service_name", n.service_name.clone())));
        labels
    }

    /// A profile's `namespace`, `pod`, `container` labels, those known.
    pub fn pod_labels(&self) -> Vec<(&'static str, String)> {
        let Some(n) = &self.names else { return vec![] };
        [("namespace", &n.namespace), ("pod", &n.pod), ("container", &n.container)]
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k, v.clone()))
            .collect()
    }

    /// "pod shop/checkout-7d9f8b-x2k4p, container app (containerd 4f0c8cf3a5e3)", or
    /// "container 4f0c8cf3a5e3 (docker)" (with "of pod UID …" in a pod the list does not
    /// name); None for a host process.
    pub fn describe(&self) -> Option<String> {
        let c = self.placement.container.as_ref()?;
        let short = self.placement.short_id()?;
        Some(match &self.names {
            Some(n) if !n.container.is_empty() => {
                format!("pod {}/{}, container {} ({} {short})", n.namespace, n.pod, n.container, c.runtime)
            }
            Some(n) => format!("pod {}/{}, container {short} ({})", n.namespace, n.pod, c.runtime),
            None => match &c.pod_uid {
                Some(uid) => format!("container {short} ({}) of pod UID {uid}", c.runtime),
                None => format!("container {short} ({})", c.runtime),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_by_container_then_by_pod_and_labels_without_empties() {
        let id = "b".repeat(64);
        let uid = "11111111-2222-3333-4444-555555555555";
        let list = serde_json::json!({"items": [{
            "metadata": {"name": "ingest-0", "namespace": "data", "uid": uid},
            "status": {"containerStatuses": [{"name": "worker", "containerID": format!("containerd://{id}")}]}}]});
        let list = pods::parse(list.to_string().as_bytes()).unwrap();
        let placed = |id: &str| container::from_proc_cgroup(&format!("0::/kubepods/burstable/pod{uid}/{id}\n"));
        let known = Identity::resolve(&placed(&id), &list);
        assert_eq!(known.describe().unwrap(), format!("pod data/ingest-0, container worker (unknown {})", &id[..12]));
        assert_eq!(known.wants_names(), None);
        let l = known.labels();
        let get = |l: &[(&str, String)], k: &str| l.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
        assert_eq!(get(&l, "container").as_deref(), Some("worker"));
        assert_eq!(get(&l, "service_name").as_deref(), Some("data/worker"));
        assert_eq!(get(&l, "pod_uid").as_deref(), Some(uid));
        let unnamed = Identity::resolve(&placed(&id), &PodNames::default());
        assert_eq!(unnamed.describe().unwrap(), format!("container {} (unknown) of pod UID {uid}", &id[..12]));
        // a container newer than the list: its pod by UID, and a fetch wanted
        let newer = Identity::resolve(&placed(&"c".repeat(64)), &list);
        assert_eq!(newer.names.as_ref().map(|n| (n.pod.as_str(), n.container.as_str())), Some(("ingest-0", "")));
        assert_eq!(newer.wants_names(), Some("c".repeat(64).as_str()));
        assert_eq!(get(&newer.labels(), "container"), None);
        // a host process
        let host = Identity::resolve(&container::from_proc_cgroup("0::/system.slice/cron.service\n"), &list);
        assert_eq!(host.describe(), None);
        assert_eq!(host.wants_names(), None);
        assert_eq!(host.labels(), vec![("cgroup", "/system.slice/cron.service".to_string()), ("runtime", "host".to_string())]);
        // a container outside Kubernetes wants no pod list
        assert_eq!(
            Identity::resolve(&container::from_proc_cgroup(&format!("0::/docker/{id}\n")), &PodNames::default()).wants_names(),
            None
        );
    }
}
