//! The names of a node's containers, from a Kubernetes `v1.PodList` (what the
//! API server answers to `GET /api/v1/pods?fieldSelector=spec.nodeName=N` and
//! the kubelet to `GET /pods`): container ID -> namespace, pod, container and
//! the service name profiles go under. Pure; the answer is untrusted: a pod
//! whose names are not Kubernetes names, or a container ID that is not 64 hex
//! digits, is skipped and counted.
use std::collections::HashMap;

use serde_json::Value;

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

/// A service name from a pod's metadata: printable, at most 200 characters.
fn service_name_of(meta: &Value) -> Option<String> {
    let from = |key: &str| meta.get("annotations")?.get(key)?.as_str().map(str::trim).filter(|s| !s.is_empty());
    let v = SERVICE_NAME_KEYS.iter().find_map(|k| from(k))?;
    (v.len() <= 200 && !v.chars().any(char::is_control)).then(|| v.to_string())
}

/// `containerd://<id>`, `cri-o://<id>`, `docker://<id>` -> the ID.
fn status_id(s: &str) -> Option<&str> {
    let id = s.split_once("://")?.1;
    (id.len() == 64 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))).then_some(id)
}

/// Parse a PodList. Err: not a PodList at all (not JSON, no `items` array).
pub fn parse(body: &[u8]) -> Result<PodNames, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let items = v.get("items").and_then(Value::as_array).ok_or("no `items` array: not a PodList")?;
    let mut out = PodNames::default();
    for pod in items {
        let meta = pod.get("metadata").unwrap_or(&Value::Null);
        let s = |k: &str| meta.get(k).and_then(Value::as_str).unwrap_or("");
        let (namespace, name, uid) = (s("namespace"), s("name"), s("uid"));
        if !is_dns_name(namespace, 63, false) || !is_dns_name(name, 253, true) {
            out.skipped += 1;
            continue;
        }
        let service = service_name_of(meta);
        let names = |container: &str| Names {
            namespace: namespace.to_string(),
            pod: name.to_string(),
            container: container.to_string(),
            service_name: service.clone().unwrap_or_else(|| format!("{namespace}/{}", if container.is_empty() { name } else { container })),
        };
        if uid.len() <= 36 && !uid.is_empty() && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
            out.by_pod.insert(uid.to_ascii_lowercase(), names(""));
        }
        let status = pod.get("status").unwrap_or(&Value::Null);
        for field in ["containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"] {
            for cs in status.get(field).and_then(Value::as_array).into_iter().flatten() {
                let cname = cs.get("name").and_then(Value::as_str).unwrap_or("");
                // a container not started yet has no ID: not an error
                let Some(raw) = cs.get("containerID").and_then(Value::as_str).filter(|s| !s.is_empty()) else { continue };
                match status_id(raw) {
                    Some(id) if is_dns_name(cname, 63, false) => {
                        out.by_container.insert(id.to_string(), names(cname));
                    }
                    _ => out.skipped += 1,
                }
            }
        }
    }
    Ok(out)
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
    fn garbage_is_an_error_not_a_panic() {
        for body in [&b""[..], b"{", b"[]", b"{\"items\": 3}", b"\xff\xfe", b"null"] {
            assert!(parse(body).is_err(), "{body:?}");
        }
        assert_eq!(parse(b"{\"items\": []}").unwrap(), PodNames::default());
        let deep = "[".repeat(10_000);
        assert!(parse(format!("{{\"items\": {deep}").as_bytes()).is_err());
    }
}
