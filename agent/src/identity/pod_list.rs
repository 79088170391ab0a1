//! Reading a Kubernetes `v1.PodList` as a stream (serde's visitors over serde_json): each pod's
//! few fields that name containers are read and handed on before the next pod is read, and
//! everything else is read past without being kept, whatever its shape. Memory is one pod's
//! record, not a multiple of the list (issue 54: parsed whole into a `serde_json::Value`, a list
//! cost 20-30 times its body). What the records mean is `pods.rs`'s.
use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The most container statuses one pod's record keeps; past them they are counted in `dropped`.
pub const MAX_STATUSES_PER_POD: usize = 256;

/// The longest string kept from the list (a pod name is at most 253 bytes, a container status'
/// ID 64 and its prefix, a service name 200): a longer one is read past and reads as absent.
const MAX_KEPT: usize = 256;

/// A pod as the list has it: an object, or anything else (`NotObject`).
pub enum Pod {
    Object(PodRecord),
    NotObject,
}

/// What a pod's record keeps: its names, its UID, the annotations asked for, and its container
/// statuses as (name, containerID), at most MAX_STATUSES_PER_POD of them.
#[derive(Default)]
pub struct PodRecord {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub uid: Option<String>,
    /// the values of the annotations asked for, in the order asked
    pub annotations: Vec<Option<String>>,
    pub statuses: Vec<(Option<String>, Option<String>)>,
    /// statuses past MAX_STATUSES_PER_POD
    pub dropped: u64,
}

/// Read `body`, handing each pod of its `items` to `each` as it is read, keeping the values of
/// the annotations named `annotations`. Err: not JSON, or no `items` array (not a PodList).
pub fn read(body: &[u8], annotations: &[&str], each: &mut dyn FnMut(Pod)) -> Result<(), String> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let saw_items = List { annotations, each }.deserialize(&mut de).map_err(|e| format!("not JSON: {e}"))?;
    de.end().map_err(|e| format!("not JSON: {e}"))?;
    if !saw_items {
        return Err("no `items` array: not a PodList".into());
    }
    Ok(())
}

/// A visitor's methods for what it does not take, each read past and answered `$out`: `scalars`
/// (strings, and the `non_strings`: booleans, numbers, null), `seq` (an array), `map` (an object).
macro_rules! read_past {
    (scalars, $out:expr) => {
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok($out)
        }
        read_past!(non_strings, $out);
    };
    (non_strings, $out:expr) => {
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
    (seq, $out:expr) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok($out)
        }
    };
    (map, $out:expr) => {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok($out)
        }
    };
}

/// A visitor of any JSON value, `$t`, answering `$value` ("expecting" `$what`), with a seed that
/// reads it; what it does not take (`read_past!` kinds, answered `$out`) is read past; `$body`:
/// the methods of what it takes.
macro_rules! visitor {
    ($t:ty, $value:ty, $what:literal, past [$($kind:ident),*] => $out:expr, { $($body:tt)* }) => {
        impl<'de> DeserializeSeed<'de> for $t {
            type Value = $value;
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<$value, D::Error> {
                d.deserialize_any(self)
            }
        }
        impl<'de> Visitor<'de> for $t {
            type Value = $value;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str($what)
            }
            $(read_past!($kind, $out);)*
            $($body)*
        }
    };
}

/// The top level: `items` read pod by pod, every other field read past. true: there was an
/// `items` array (a second one is read past).
struct List<'a, 'b> {
    annotations: &'a [&'a str],
    each: &'b mut dyn FnMut(Pod),
}

impl<'de> DeserializeSeed<'de> for List<'_, '_> {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for List<'_, '_> {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a PodList object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let mut saw = false;
        while let Some(key) = map.next_key::<Key>()? {
            if key.0 == "items" && !saw {
                map.next_value_seed(Items { annotations: self.annotations, each: &mut *self.each })?;
                saw = true;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(saw)
    }
}

/// `items`: each pod handed on as it is read.
struct Items<'a, 'b> {
    annotations: &'a [&'a str],
    each: &'b mut dyn FnMut(Pod),
}

impl<'de> DeserializeSeed<'de> for Items<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Items<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an `items` array")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(pod) = seq.next_element_seed(PodSeed(self.annotations))? {
            (self.each)(pod);
        }
        Ok(())
    }
}

/// An object key, borrowed from the body where it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(v.into()))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                // an escaped key: only its first characters matter (no key asked for is longer)
                Ok(Key(v.chars().take(64).collect::<String>().into()))
            }
        }
        d.deserialize_str(V)
    }
}

/// Any value, kept when it is a string of at most MAX_KEPT bytes (None otherwise: read past).
struct Kept;
visitor!(Kept, Option<String>, "any value", past [non_strings, seq, map] => None, {
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<String>, E> {
            Ok((v.len() <= MAX_KEPT).then(|| v.to_string()))
        }
});

/// A pod: `metadata` and `status` read, the rest (`spec`, ...) read past.
struct PodSeed<'a>(&'a [&'a str]);
visitor!(PodSeed<'_>, Pod, "a pod", past [scalars, seq] => Pod::NotObject, {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Pod, A::Error> {
            let mut pod = PodRecord { annotations: vec![None; self.0.len()], ..Default::default() };
            while let Some(key) = map.next_key::<Key>()? {
                match &*key.0 {
                    "metadata" => map.next_value_seed(Metadata(&mut pod, self.0))?,
                    "status" => map.next_value_seed(Status(&mut pod))?,
                    _ => drop(map.next_value::<IgnoredAny>()?),
                }
            }
            Ok(Pod::Object(pod))
        }
});

/// A pod's `metadata`: its names, its UID and the annotations asked for.
struct Metadata<'a>(&'a mut PodRecord, &'a [&'a str]);
visitor!(Metadata<'_>, (), "a pod's metadata", past [scalars, seq] => (), {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let Metadata(pod, asked) = self;
            while let Some(key) = map.next_key::<Key>()? {
                match &*key.0 {
                    "name" => pod.name = map.next_value_seed(Kept)?,
                    "namespace" => pod.namespace = map.next_value_seed(Kept)?,
                    "uid" => pod.uid = map.next_value_seed(Kept)?,
                    "annotations" => map.next_value_seed(Annotations(&mut pod.annotations, asked))?,
                    _ => drop(map.next_value::<IgnoredAny>()?),
                }
            }
            Ok(())
        }
});

/// A pod's annotations: the values of those asked for kept, the rest read past.
struct Annotations<'a>(&'a mut Vec<Option<String>>, &'a [&'a str]);
visitor!(Annotations<'_>, (), "a pod's annotations", past [scalars, seq] => (), {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let Annotations(out, asked) = self;
            while let Some(key) = map.next_key::<Key>()? {
                match asked.iter().position(|k| key.0 == *k) {
                    Some(i) => out[i] = map.next_value_seed(Kept)?,
                    None => drop(map.next_value::<IgnoredAny>()?),
                }
            }
            Ok(())
        }
});

/// A pod's `status`: its container, init container and ephemeral container statuses.
struct Status<'a>(&'a mut PodRecord);
visitor!(Status<'_>, (), "a pod's status", past [scalars, seq] => (), {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<Key>()? {
                match &*key.0 {
                    "containerStatuses" | "initContainerStatuses" | "ephemeralContainerStatuses" => {
                        map.next_value_seed(Statuses(&mut *self.0))?
                    }
                    _ => drop(map.next_value::<IgnoredAny>()?),
                }
            }
            Ok(())
        }
});

/// One of a status' lists of container statuses, into the pod's record up to its bound.
struct Statuses<'a>(&'a mut PodRecord);
visitor!(Statuses<'_>, (), "a list of container statuses", past [scalars, map] => (), {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while let Some(cs) = seq.next_element_seed(ContainerStatus)? {
                if self.0.statuses.len() >= MAX_STATUSES_PER_POD {
                    self.0.dropped += 1;
                } else if let Some(s) = cs {
                    self.0.statuses.push(s);
                }
            }
            Ok(())
        }
});

/// A container status' name and containerID (None: not an object).
struct ContainerStatus;
visitor!(ContainerStatus, Option<(Option<String>, Option<String>)>, "a container status", past [scalars, seq] => None, {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let (mut name, mut id) = (None, None);
            while let Some(key) = map.next_key::<Key>()? {
                match &*key.0 {
                    "name" => name = map.next_value_seed(Kept)?,
                    "containerID" => id = map.next_value_seed(Kept)?,
                    _ => drop(map.next_value::<IgnoredAny>()?),
                }
            }
            Ok(Some((name, id)))
        }
});
