//! How the report's numbers are serialised (the JSON report and the typed findings share
//! them), and `Fields`: a serialised value kept in its order, the evidence of a finding
//! whose type the `Finding` holding it does not know (`rules::Claim`).
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

use crate::model::blame;
use crate::model::partition::secs;
use crate::model::state::State;

/// Seconds and cores: six digits.
pub fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// Ratios and shares: four digits.
pub fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// A futex word's address: "0x7f0000001000" (a parked one's without its tag).
pub fn hex_addr(addr: u64) -> String {
    format!("{:#x}", blame::address(addr))
}

pub fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

// serde `serialize_with` helpers for the typed findings: their numbers as the rest of the object has them

/// nanoseconds as seconds
pub fn seconds<S: Serializer>(ns: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(round6(secs(*ns)))
}

pub fn rounded<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(round6(*x))
}

pub fn ratio<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(round4(*x))
}

/// a state by its stable name
pub fn state_name<S: Serializer>(state: &State, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(state.name())
}

pub fn hex<S: Serializer>(addr: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex_addr(*addr))
}

/// an address that is there (with `skip_serializing_if = "Option::is_none"`)
pub fn hex_some<S: Serializer>(addr: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match addr {
        Some(a) => hex(a, s),
        None => s.serialize_none(),
    }
}

/// A serialised value as JSON has it, objects in the order they were written (a
/// `serde_json::Value` sorts their keys): what a value of any type serialises to, held
/// without its type, and serialised again as it was.
#[derive(Clone, Debug, PartialEq)]
pub enum Fields {
    Null,
    Bool(bool),
    U64(u64),
    I64(i64),
    F64(f64),
    Str(String),
    List(Vec<Fields>),
    Object(Vec<(String, Fields)>),
}

impl Fields {
    /// `value` as it serialises.
    pub fn of<T: Serialize>(value: &T) -> Fields {
        let text = serde_json::to_string(value).expect("evidence always serialises");
        serde_json::from_str(&text).expect("serde_json reads what it wrote")
    }

    /// The entries of an object (none for any other value).
    pub fn entries(&self) -> &[(String, Fields)] {
        match self {
            Fields::Object(entries) => entries,
            _ => &[],
        }
    }
}

impl Serialize for Fields {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Fields::Null => s.serialize_unit(),
            Fields::Bool(b) => s.serialize_bool(*b),
            Fields::U64(n) => s.serialize_u64(*n),
            Fields::I64(n) => s.serialize_i64(*n),
            Fields::F64(x) => s.serialize_f64(*x),
            Fields::Str(t) => s.serialize_str(t),
            Fields::List(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Fields::Object(entries) => {
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Fields {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Fields, D::Error> {
        struct Read;
        impl<'de> Visitor<'de> for Read {
            type Value = Fields;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<Fields, E> {
                Ok(Fields::Null)
            }
            fn visit_none<E>(self) -> Result<Fields, E> {
                Ok(Fields::Null)
            }
            fn visit_bool<E>(self, b: bool) -> Result<Fields, E> {
                Ok(Fields::Bool(b))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Fields, E> {
                Ok(Fields::U64(n))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Fields, E> {
                Ok(Fields::I64(n))
            }
            fn visit_f64<E>(self, x: f64) -> Result<Fields, E> {
                Ok(Fields::F64(x))
            }
            fn visit_str<E>(self, t: &str) -> Result<Fields, E> {
                Ok(Fields::Str(t.to_string()))
            }
            fn visit_string<E>(self, t: String) -> Result<Fields, E> {
                Ok(Fields::Str(t))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Fields, A::Error> {
                let mut items = vec![];
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Fields::List(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
                let mut entries = vec![];
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(Fields::Object(entries))
            }
        }
        d.deserialize_any(Read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_keep_the_order_and_the_numbers_as_written() {
        #[derive(Serialize)]
        struct Inner {
            tid: u32,
            name: Option<String>,
        }
        #[derive(Serialize)]
        struct Outer {
            zeta: f64,
            alpha: Inner,
            count: u64,
            delta: i64,
            none: Option<u8>,
            list: Vec<f64>,
            text: &'static str,
        }
        let v = Outer {
            zeta: 9.0,
            alpha: Inner { tid: 7, name: None },
            count: 3,
            delta: -2,
            none: None,
            list: vec![0.1, 1e-7, 12345.678],
            text: "a \"quoted\" µs",
        };
        let direct = serde_json::to_string_pretty(&v).unwrap();
        assert_eq!(serde_json::to_string_pretty(&Fields::of(&v)).unwrap(), direct);
        assert_eq!(Fields::of(&v).entries()[0].0, "zeta");
    }
}
