//! The names of a node's containers, from a Kubernetes `v1.PodList` (what the
//! API server answers to `GET /api/v1/pods?fieldSelector=spec.nodeName=N` and
//! the kubelet to `GET /pods`): container ID -> namespace, pod, container and
//! the service name profiles go under. Pure; the answer is untrusted: a pod
//! whose names are not Kubernetes names, or a container ID that is not 64 hex
//! digits, is skipped and counted.
use std::collections::HashMap;

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

/// What one list keeps at most: pods, container statuses in all, and statuses of one pod (a node
/// runs 110 pods by default and rarely more than a few hundred; a list past these is a cluster's
/// whole list or a hostile tenant's). Past them entries are dropped and counted, so the names
/// kept cost a few MB whatever the list (issue 54: a list parsed whole cost 20-30 times its body).
pub const MAX_PODS: usize = 5_000;
pub const MAX_CONTAINERS: usize = 20_000;
pub const MAX_STATUSES_PER_POD: usize = 256;

/// The longest string kept from the list (a pod name is at most 253 bytes, a container status'
/// ID 64 and its prefix, a service name 200): a longer one is read past and reads as malformed.
const MAX_KEPT: usize = 256;

/// Parse a PodList as a stream: each pod is read and its names kept (only the fields used: the
/// names, the UID, the containers' names and IDs, the two service-name annotations) before the
/// next is read, and nothing else of the list is held, so memory is what is kept (bounded by the
/// MAX_ constants) plus one pod's statuses, not a multiple of the body. Err: not a PodList at all
/// (not JSON, no `items` array).
pub fn parse(body: &[u8]) -> Result<PodNames, String> {
    let mut out = PodNames::default();
    let mut de = serde_json::Deserializer::from_slice(body);
    let saw_items = ListSeed(&mut out).deserialize(&mut de).map_err(|e| format!("not JSON: {e}"))?;
    de.end().map_err(|e| format!("not JSON: {e}"))?;
    if !saw_items {
        return Err("no `items` array: not a PodList".into());
    }
    Ok(out)
}

impl PodNames {
    /// Keep one pod's names, or count it skipped (malformed) or dropped (past the bounds).
    fn add(&mut self, pod: Pod) {
        let Pod::Object { meta, statuses, dropped } = pod else {
            self.skipped += 1;
            return;
        };
        self.dropped += dropped;
        let (Some(namespace), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref()) else {
            self.skipped += 1;
            return;
        };
        if !is_dns_name(namespace, 63, false) || !is_dns_name(name, 253, true) {
            self.skipped += 1;
            return;
        }
        if self.by_pod.len() >= MAX_PODS {
            self.dropped += 1 + statuses.len() as u64;
            return;
        }
        // the first of SERVICE_NAME_KEYS that says something; printable, at most 200 characters
        let service = meta
            .service
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
        match meta.uid.as_deref() {
            Some(uid) if uid.len() <= 36 && !uid.is_empty() && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') => {
                self.by_pod.insert(uid.to_ascii_lowercase(), names(""));
            }
            // no UID: named by its containers only
            _ => {}
        }
        for (cname, raw) in statuses {
            // a container not started yet has no ID: not an error
            let Some(raw) = raw.filter(|s| !s.is_empty()) else { continue };
            match (status_id(&raw), cname.as_deref()) {
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

/// A pod as the list has it: an object (its metadata, its container statuses as (name,
/// containerID), and the statuses past MAX_STATUSES_PER_POD, dropped), or anything else.
enum Pod {
    Object { meta: Meta, statuses: Vec<(Option<String>, Option<String>)>, dropped: u64 },
    NotObject,
}

#[derive(Default)]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    /// the annotations of SERVICE_NAME_KEYS, in that order
    service: [Option<String>; 2],
}

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The top level: `items` read pod by pod into the names, every other field read past. true:
/// there was an `items` array.
struct ListSeed<'a>(&'a mut PodNames);

impl<'de> DeserializeSeed<'de> for ListSeed<'_> {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ListSeed<'_> {
    type Value = bool;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a PodList object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let mut saw = false;
        while let Some(key) = map.next_key::<Key>()? {
            if key.is("items") && !saw {
                map.next_value_seed(Items(self.0))?;
                saw = true;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(saw)
    }
}

/// `items`: each pod added as it is read.
struct Items<'a>(&'a mut PodNames);

impl<'de> DeserializeSeed<'de> for Items<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Items<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an `items` array")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(pod) = seq.next_element::<Pod>()? {
            self.0.add(pod);
        }
        Ok(())
    }
}

/// An object key, borrowed from the body where it has no escapes.
struct Key<'de>(std::borrow::Cow<'de, str>);

impl Key<'_> {
    fn is(&self, k: &str) -> bool {
        self.0 == k
    }
}

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(v.into()))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                // an escaped key: only its first bytes matter (no key used is longer)
                Ok(Key(v.chars().take(64).collect::<String>().into()))
            }
        }
        d.deserialize_str(V)
    }
}

/// Any value, kept when it is a string of at most MAX_KEPT bytes (None otherwise: read past).
struct Kept(Option<String>);

impl<'de> de::Deserialize<'de> for Kept {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Kept;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any value")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Kept, E> {
                Ok(Kept((v.len() <= MAX_KEPT).then(|| v.to_string())))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Kept, E> {
                Ok(Kept(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Kept, E> {
                Ok(Kept(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Kept, E> {
                Ok(Kept(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Kept, E> {
                Ok(Kept(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Kept, E> {
                Ok(Kept(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kept, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Kept(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Kept, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Kept(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// Read past what is not an object or an array (the caller's visitors take those).
macro_rules! read_past_scalars {
    ($out:expr) => {
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($out)
        }
    };
}

impl<'de> de::Deserialize<'de> for Pod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Pod;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a pod")
            }
            read_past_scalars!(Pod::NotObject);
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Pod, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Pod::NotObject)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Pod, A::Error> {
                let (mut meta, mut statuses, mut dropped) = (Meta::default(), Vec::new(), 0);
                while let Some(key) = map.next_key::<Key>()? {
                    if key.is("metadata") {
                        meta = map.next_value_seed(MetaSeed)?;
                    } else if key.is("status") {
                        map.next_value_seed(StatusSeed { statuses: &mut statuses, dropped: &mut dropped })?;
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(Pod::Object { meta, statuses, dropped })
            }
        }
        d.deserialize_any(V)
    }
}

/// A pod's `metadata`: its names, its UID and the service-name annotations.
struct MetaSeed;

impl<'de> DeserializeSeed<'de> for MetaSeed {
    type Value = Meta;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Meta, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MetaSeed {
    type Value = Meta;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a pod's metadata")
    }
    read_past_scalars!(Meta::default());
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Meta, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Meta::default())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Meta, A::Error> {
        let mut meta = Meta::default();
        while let Some(key) = map.next_key::<Key>()? {
            match &*key.0 {
                "name" => meta.name = map.next_value::<Kept>()?.0,
                "namespace" => meta.namespace = map.next_value::<Kept>()?.0,
                "uid" => meta.uid = map.next_value::<Kept>()?.0,
                "annotations" => meta.service = map.next_value_seed(Annotations)?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(meta)
    }
}

/// A pod's annotations: those of SERVICE_NAME_KEYS kept, the rest read past.
struct Annotations;

impl<'de> DeserializeSeed<'de> for Annotations {
    type Value = [Option<String>; 2];
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Annotations {
    type Value = [Option<String>; 2];
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a pod's annotations")
    }
    read_past_scalars!([None, None]);
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok([None, None])
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = [None, None];
        while let Some(key) = map.next_key::<Key>()? {
            match SERVICE_NAME_KEYS.iter().position(|k| key.is(k)) {
                Some(i) => out[i] = map.next_value::<Kept>()?.0,
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(out)
    }
}

/// A pod's `status`: the (name, containerID) of its container, init container and ephemeral
/// container statuses, at most MAX_STATUSES_PER_POD (the rest counted in `dropped`).
struct StatusSeed<'a> {
    statuses: &'a mut Vec<(Option<String>, Option<String>)>,
    dropped: &'a mut u64,
}

impl<'de> DeserializeSeed<'de> for StatusSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StatusSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a pod's status")
    }
    read_past_scalars!(());
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key>()? {
            if ["containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"].iter().any(|k| key.is(k)) {
                map.next_value_seed(StatusList { statuses: &mut *self.statuses, dropped: &mut *self.dropped })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// One of a status' lists of container statuses.
struct StatusList<'a> {
    statuses: &'a mut Vec<(Option<String>, Option<String>)>,
    dropped: &'a mut u64,
}

impl<'de> DeserializeSeed<'de> for StatusList<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StatusList<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of container statuses")
    }
    read_past_scalars!(());
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(cs) = seq.next_element::<ContainerStatus>()? {
            if self.statuses.len() >= MAX_STATUSES_PER_POD {
                *self.dropped += 1;
            } else if let ContainerStatus(Some(s)) = cs {
                self.statuses.push(s);
            }
        }
        Ok(())
    }
}

/// A container status' name and containerID (None: not an object).
struct ContainerStatus(Option<(Option<String>, Option<String>)>);

impl<'de> de::Deserialize<'de> for ContainerStatus {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ContainerStatus;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a container status")
            }
            read_past_scalars!(ContainerStatus(None));
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ContainerStatus, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(ContainerStatus(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ContainerStatus, A::Error> {
                let (mut name, mut id) = (None, None);
                while let Some(key) = map.next_key::<Key>()? {
                    if key.is("name") {
                        name = map.next_value::<Kept>()?.0;
                    } else if key.is("containerID") {
                        id = map.next_value::<Kept>()?.0;
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(ContainerStatus(Some((name, id))))
            }
        }
        d.deserialize_any(V)
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
