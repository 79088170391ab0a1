//! The names of a node's containers, from a Kubernetes `v1.PodList` (what the
//! API server answers to `GET /api/v1/pods?fieldSelector=spec.nodeName=N` and
//! the kubelet to `GET /pods`): container ID -> namespace, pod, container and
//! the service name profiles go under. Pure; the answer is untrusted: a pod
//! whose names are not Kubernetes names, or a container ID that is not 64 hex
//! digits, is skipped and counted.
use std::collections::HashMap;

use super::pod_list::Pod;

/// What a process' series and profiles are named by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Names {
    pub namespace: String,
    pub pod: String,
    /// "" when only the pod is known (its UID named it, its container status did not)
    pub container: String,
    /// Pyroscope's `service_name`: the pod's annotation when it has one
    /// (`SERVICE_NAME_KEYS`), else `namespace/container` (`namespace/pod`
    /// without a container name)
    pub service_name: String,
}

/// The pod annotations that name its service, in this order: Pyroscope's own
/// (its eBPF integration reads it first), then OpenTelemetry's (Grafana's
/// Kubernetes monitoring chart reads it first).
pub const SERVICE_NAME_KEYS: [&str; 2] = ["pyroscope.io/service_name", "resource.opentelemetry.io/service.name"];

/// A node's containers and pods by what the cgroup paths name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodNames {
    by_container: HashMap<String, Names>,
    /// pod UID -> its names with no container (a container that started
    /// after the list was read is named by its pod until the next one)
    by_pod: HashMap<String, Names>,
    /// pods and container statuses skipped as malformed
    pub skipped: u64,
    /// pods and container statuses dropped past the bounds (MAX_PODS, MAX_CONTAINERS,
    /// MAX_STATUSES_PER_POD)
    pub dropped: u64,
}

impl PodNames {
    pub fn container(&self, id: &str) -> Option<&Names> {
        self.by_container.get(id)
    }

    pub fn pod(&self, uid: &str) -> Option<&Names> {
        self.by_pod.get(uid)
    }

    pub fn containers(&self) -> usize {
        self.by_container.len()
    }

    pub fn pods(&self) -> usize {
        self.by_pod.len()
    }
}

/// A DNS-1123 label (namespaces, containers) or subdomain (pods).
fn is_dns_name(s: &str, max: usize, dots: bool) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || (dots && b == b'.'))
        && !s.starts_with(['-', '.'])
        && !s.ends_with(['-', '.'])
}

/// `containerd://<id>`, `cri-o://<id>`, `docker://<id>` -> the ID.
fn status_id(s: &str) -> Option<&str> {
    let id = s.split_once("://")?.1;
    (id.len() == 64 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))).then_some(id)
}

/// What one list keeps at most: pods, and container statuses in all (and of one pod,
/// `pod_list::MAX_STATUSES_PER_POD`). A node runs 110 pods by default and rarely more than a few
/// hundred; a list past these is a cluster's whole list or a hostile tenant's. Past them entries
/// are dropped and counted, so the names kept cost a few MB whatever the list.
pub const MAX_PODS: usize = 5_000;
pub const MAX_CONTAINERS: usize = 20_000;
pub use super::pod_list::MAX_STATUSES_PER_POD;

/// Parse a PodList, read as a stream (`pod_list`): each pod's names are kept before the next pod
/// is read, and nothing else of the list is held, so memory is what is kept (bounded by the MAX_
/// constants) plus one pod's record, not a multiple of the body. Err: not a PodList at all (not
/// JSON, no `items` array).
pub fn parse(body: &[u8]) -> Result<PodNames, String> {
    let mut out = PodNames::default();
    super::pod_list::read(body, &SERVICE_NAME_KEYS, &mut |pod| out.add(pod))?;
    Ok(out)
}

impl PodNames {
    /// Keep one pod's names, or count it skipped (malformed) or dropped (past the bounds).
    fn add(&mut self, pod: Pod) {
        let Pod::Object(pod) = pod else {
            self.skipped += 1;
            return;
        };
        self.dropped += pod.dropped;
        let (Some(namespace), Some(name)) = (pod.namespace.as_deref(), pod.name.as_deref()) else {
            self.skipped += 1;
            return;
        };
        if !is_dns_name(namespace, 63, false) || !is_dns_name(name, 253, true) {
            self.skipped += 1;
            return;
        }
        if self.by_pod.len() >= MAX_PODS {
            self.dropped += 1 + pod.statuses.len() as u64;
            return;
        }
        // the first of SERVICE_NAME_KEYS that says something; printable, at most 200 characters
        let service = pod
            .annotations
            .iter()
            .flatten()
            .map(|s| s.trim())
            .find(|s| !s.is_empty())
            .filter(|s| s.len() <= 200 && !s.chars().any(char::is_control));
        let names = |container: &str| Names {
            namespace: namespace.to_string(),
            pod: name.to_string(),
            container: container.to_string(),
            service_name: service
                .map_or_else(|| format!("{namespace}/{}", if container.is_empty() { name } else { container }), str::to_string),
        };
        match pod.uid.as_deref() {
            Some(uid) if uid.len() <= 36 && !uid.is_empty() && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') => {
                self.by_pod.insert(uid.to_ascii_lowercase(), names(""));
            }
            // no UID: named by its containers only
            _ => {}
        }
        for (cname, raw) in &pod.statuses {
            // a container not started yet has no ID: not an error
            let Some(raw) = raw.as_deref().filter(|s| !s.is_empty()) else { continue };
            match (status_id(raw), cname.as_deref()) {
                (Some(id), Some(cname)) if is_dns_name(cname, 63, false) => {
                    if self.by_container.len() >= MAX_CONTAINERS && !self.by_container.contains_key(id) {
                        self.dropped += 1;
                    } else {
                        self.by_container.insert(id.to_string(), names(cname));
                    }
                }
                _ => self.skipped += 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(c: char) -> String {
        c.to_string().repeat(64)
    }

    fn list() -> String {
        serde_json::json!({
            "kind": "PodList", "apiVersion": "v1",
            "items": [
                {"metadata": {"name": "checkout-7d9f8b-x2k4p", "namespace": "shop", "uid": "8D2E7F4A-1b3c-4d5e-9f60-718293a4b5c6"},
                 "status": {
                    "initContainerStatuses": [{"name": "migrate", "containerID": format!("containerd://{}", id('a'))}],
                    "containerStatuses": [
                        {"name": "app", "containerID": format!("containerd://{}", id('b'))},
                        {"name": "waiting", "state": {"waiting": {"reason": "ContainerCreating"}}}
                    ],
                    "ephemeralContainerStatuses": [{"name": "debugger", "containerID": format!("cri-o://{}", id('c'))}]}},
                {"metadata": {"name": "ingest-0", "namespace": "data", "uid": "11111111-2222-3333-4444-555555555555",
                              "labels": {"app.kubernetes.io/name": "ingest"},
                              "annotations": {"resource.opentelemetry.io/service.name": "ingest"}},
                 "status": {"containerStatuses": [{"name": "worker", "containerID": format!("docker://{}", id('d'))}]}},
                {"metadata": {"name": "api-1", "namespace": "web", "uid": "u",
                              "annotations": {"pyroscope.io/service_name": "web-api", "resource.opentelemetry.io/service.name": "second"},
                              "labels": {"app.kubernetes.io/name": "ignored"}},
                 "status": {"containerStatuses": [{"name": "api", "containerID": format!("containerd://{}", id('e'))}]}},
                {"metadata": {"name": "Bad Name", "namespace": "shop"}, "status": {"containerStatuses": [{"name": "x", "containerID": format!("containerd://{}", id('f'))}]}},
                {"metadata": {"name": "evil", "namespace": "shop"}, "status": {"containerStatuses": [
                    {"name": "x", "containerID": "containerd://../../etc"},
                    {"name": "bad\nname", "containerID": format!("containerd://{}", id('9'))}]}},
                "not an object"
            ]
        })
        .to_string()
    }

    #[test]
    fn every_kind_of_container_status_names_its_id() {
        let p = parse(list().as_bytes()).unwrap();
        let n = |c: char| p.container(&id(c)).cloned();
        let shop = |container: &str| Names {
            namespace: "shop".into(),
            pod: "checkout-7d9f8b-x2k4p".into(),
            container: container.into(),
            service_name: format!("shop/{container}"),
        };
        assert_eq!(n('a'), Some(shop("migrate")));
        assert_eq!(n('b'), Some(shop("app")));
        assert_eq!(n('c'), Some(shop("debugger")));
        assert_eq!(n('d').unwrap().service_name, "ingest");
        assert_eq!(n('e').unwrap().service_name, "web-api");
        // the pod by its UID (lowercased, as cgroup paths write it), with no container
        let pod = p.pod("8d2e7f4a-1b3c-4d5e-9f60-718293a4b5c6").unwrap();
        assert_eq!(
            (pod.pod.as_str(), pod.container.as_str(), pod.service_name.as_str()),
            ("checkout-7d9f8b-x2k4p", "", "shop/checkout-7d9f8b-x2k4p")
        );
        // skipped: the pod with a bad name, the bad ID and the bad container name; "not an object" too
        assert_eq!((n('f'), n('9')), (None, None));
        assert_eq!(p.skipped, 4);
        assert_eq!((p.containers(), p.pods()), (5, 2));
    }

    #[test]
    fn a_list_past_the_bounds_keeps_what_fits_and_counts_the_rest() {
        // more pods than kept, each with one container; one pod with more statuses than kept
        let pods: Vec<_> = (0..MAX_PODS + 10)
            .map(|i| {
                serde_json::json!({"metadata": {"name": format!("p-{i}"), "namespace": "n", "uid": format!("{i:08x}")},
                "status": {"containerStatuses": [{"name": "c", "containerID": format!("containerd://{i:064x}")}]}})
            })
            .collect();
        let p = parse(serde_json::json!({"items": pods}).to_string().as_bytes()).unwrap();
        assert_eq!((p.pods(), p.containers(), p.skipped, p.dropped), (MAX_PODS, MAX_PODS, 0, 20));
        let statuses: Vec<_> = (0..MAX_STATUSES_PER_POD + 7)
            .map(|i| serde_json::json!({"name": "c", "containerID": format!("containerd://{i:064x}")}))
            .collect();
        let one = serde_json::json!({"items": [{"metadata": {"name": "p", "namespace": "n"}, "status": {"containerStatuses": statuses}}]});
        let p = parse(one.to_string().as_bytes()).unwrap();
        assert_eq!((p.containers(), p.dropped), (MAX_STATUSES_PER_POD, 7));
    }

    #[test]
    fn what_is_not_used_is_read_past_whatever_its_shape() {
        // annotations by the thousand, long values, managedFields, env, a metadata or status of the
        // wrong type, escaped keys, duplicate `items`: the names are those of the plain list
        let mut annotations = serde_json::Map::new();
        for i in 0..5_000 {
            annotations.insert(format!("k{i}"), serde_json::Value::String("v".repeat(50)));
        }
        annotations.insert("pyroscope.io/service_name".into(), "svc".into());
        let list = serde_json::json!({
            "kind": "PodList",
            "items": [
                {"metadata": {"name": "a", "namespace": "n", "annotations": annotations,
                              "managedFields": [{"fieldsV1": {"f:spec": {"f:containers": {}}}}]},
                 "spec": {"containers": [{"env": [{"name": "X", "value": "y".repeat(10_000)}]}]},
                 "status": {"containerStatuses": [{"name": "c", "containerID": format!("containerd://{}", id('a'))}]}},
                {"metadata": ["not", "an", "object"], "status": 7},
                {"metadata": {"name": "b", "namespace": "n"}, "status": {"containerStatuses": {"name": "c"}}},
                {"metadata": {"name": "x".repeat(300), "namespace": "n"}},
                {"ESCAPED": {"name": "c", "namespace": "n"},
                 "status": {"containerStatuses": [{"name": "c", "containerID": format!("containerd://{}", id('c'))}, 5]}}
            ]
        });
        // a key written with an escape; a second `items`
        let text = list.to_string().replace("\"ESCAPED\"", "\"met\\u0061data\"");
        let text = format!("{}, \"items\": \"a second is read past\"}}", &text[..text.len() - 1]);
        let p = parse(text.as_bytes()).unwrap();
        assert_eq!(p.container(&id('a')).map(|n| n.service_name.as_str()), Some("svc"));
        assert_eq!(p.container(&id('c')).map(|n| n.pod.as_str()), Some("c"));
        // the metadata of the wrong type, the over-long name (read past: no name)
        assert_eq!((p.containers(), p.skipped, p.dropped), (2, 2, 0));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for body in [&b""[..], b"{", b"[]", b"{\"items\": 3}", b"\xff\xfe", b"null"] {
            assert!(parse(body).is_err(), "{body:?}");
        }
        assert_eq!(parse(b"{\"items\": []}").unwrap(), PodNames::default());
        let deep = "[".repeat(10_000);
        assert!(parse(format!("{{\"items\": {deep}").as_bytes()).is_err());
    }
}
