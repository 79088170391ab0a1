//! How the report's numbers are serialised (the JSON report and the typed findings share
//! them), and `Fields`: a serialised value kept in its order, the evidence of a finding
//! whose type the `Finding` holding it does not know (`rules::Claim`).
use serde::ser::{self, SerializeMap, SerializeSeq};
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
/// without its type, and serialised again as it was (`Collect`).
#[derive(Clone, Debug, PartialEq)]
pub enum Fields {
    Null,
    Bool(bool),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Str(String),
    List(Vec<Fields>),
    Object(Vec<(String, Fields)>),
}

impl Fields {
    /// `value` as it serialises.
    pub fn of<T: Serialize>(value: &T) -> Fields {
        value.serialize(Collect).expect("evidence serialises as JSON does")
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
            Fields::F32(x) => s.serialize_f32(*x),
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

/// Serialises a value into `Fields`: what serde_json would write, numbers as they are (no
/// text in between), objects in their order.
struct Collect;

/// A list, or an object's entries, being collected (`Some(name)`: a variant's, wrapped in it).
struct Many {
    variant: Option<&'static str>,
    items: Vec<Fields>,
    entries: Vec<(String, Fields)>,
    key: Option<String>,
}

impl Many {
    fn new(variant: Option<&'static str>) -> Many {
        Many { variant, items: vec![], entries: vec![], key: None }
    }

    fn wrap(variant: Option<&'static str>, value: Fields) -> Fields {
        match variant {
            Some(v) => Fields::Object(vec![(v.to_string(), value)]),
            None => value,
        }
    }

    fn list(self) -> Fields {
        Many::wrap(self.variant, Fields::List(self.items))
    }

    fn object(self) -> Fields {
        Many::wrap(self.variant, Fields::Object(self.entries))
    }

    fn entry<T: ?Sized + Serialize>(&mut self, key: String, value: &T) -> Result<(), serde_json::Error> {
        self.entries.push((key, value.serialize(Collect)?));
        Ok(())
    }
}

/// An object's key as JSON writes it: a string, a number as its digits.
fn key_of(key: Fields) -> Result<String, serde_json::Error> {
    match key {
        Fields::Str(s) => Ok(s),
        Fields::U64(n) => Ok(n.to_string()),
        Fields::I64(n) => Ok(n.to_string()),
        Fields::Bool(b) => Ok(b.to_string()),
        _ => Err(serde::ser::Error::custom("an object's key must be a string")),
    }
}

impl SerializeSeq for Many {
    type Ok = Fields;
    type Error = serde_json::Error;
    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Self::Error> {
        self.items.push(value.serialize(Collect)?);
        Ok(())
    }
    fn end(self) -> Result<Fields, Self::Error> {
        Ok(self.list())
    }
}

/// A tuple is a list (a variant's, in an object of its name).
macro_rules! as_list {
    ($($what:ident::$element:ident),*) => {$(
        impl ser::$what for Many {
            type Ok = Fields;
            type Error = serde_json::Error;
            fn $element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Self::Error> {
                SerializeSeq::serialize_element(self, value)
            }
            fn end(self) -> Result<Fields, Self::Error> {
                Ok(self.list())
            }
        }
    )*};
}

as_list!(SerializeTuple::serialize_element, SerializeTupleStruct::serialize_field, SerializeTupleVariant::serialize_field);

impl SerializeMap for Many {
    type Ok = Fields;
    type Error = serde_json::Error;
    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<(), Self::Error> {
        self.key = Some(key_of(key.serialize(Collect)?)?);
        Ok(())
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Self::Error> {
        let key = self.key.take().ok_or_else(|| <serde_json::Error as ser::Error>::custom("a value without a key"))?;
        self.entry(key, value)
    }
    fn end(self) -> Result<Fields, Self::Error> {
        Ok(self.object())
    }
}

/// A struct is an object (a variant's, in an object of its name).
macro_rules! as_object {
    ($($what:ident),*) => {$(
        impl ser::$what for Many {
            type Ok = Fields;
            type Error = serde_json::Error;
            fn serialize_field<T: ?Sized + Serialize>(&mut self, key: &'static str, value: &T) -> Result<(), Self::Error> {
                self.entry(key.to_string(), value)
            }
            fn end(self) -> Result<Fields, Self::Error> {
                Ok(self.object())
            }
        }
    )*};
}

as_object!(SerializeStruct, SerializeStructVariant);

impl Serializer for Collect {
    type Ok = Fields;
    type Error = serde_json::Error;
    type SerializeSeq = Many;
    type SerializeTuple = Many;
    type SerializeTupleStruct = Many;
    type SerializeTupleVariant = Many;
    type SerializeMap = Many;
    type SerializeStruct = Many;
    type SerializeStructVariant = Many;

    fn serialize_bool(self, v: bool) -> Result<Fields, Self::Error> {
        Ok(Fields::Bool(v))
    }
    fn serialize_i8(self, v: i8) -> Result<Fields, Self::Error> {
        Ok(Fields::I64(v.into()))
    }
    fn serialize_i16(self, v: i16) -> Result<Fields, Self::Error> {
        Ok(Fields::I64(v.into()))
    }
    fn serialize_i32(self, v: i32) -> Result<Fields, Self::Error> {
        Ok(Fields::I64(v.into()))
    }
    fn serialize_i64(self, v: i64) -> Result<Fields, Self::Error> {
        Ok(Fields::I64(v))
    }
    fn serialize_u8(self, v: u8) -> Result<Fields, Self::Error> {
        Ok(Fields::U64(v.into()))
    }
    fn serialize_u16(self, v: u16) -> Result<Fields, Self::Error> {
        Ok(Fields::U64(v.into()))
    }
    fn serialize_u32(self, v: u32) -> Result<Fields, Self::Error> {
        Ok(Fields::U64(v.into()))
    }
    fn serialize_u64(self, v: u64) -> Result<Fields, Self::Error> {
        Ok(Fields::U64(v))
    }
    fn serialize_f32(self, v: f32) -> Result<Fields, Self::Error> {
        Ok(Fields::F32(v))
    }
    fn serialize_f64(self, v: f64) -> Result<Fields, Self::Error> {
        Ok(Fields::F64(v))
    }
    fn serialize_char(self, v: char) -> Result<Fields, Self::Error> {
        Ok(Fields::Str(v.to_string()))
    }
    fn serialize_str(self, v: &str) -> Result<Fields, Self::Error> {
        Ok(Fields::Str(v.to_string()))
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<Fields, Self::Error> {
        Ok(Fields::List(v.iter().map(|b| Fields::U64((*b).into())).collect()))
    }
    fn serialize_none(self) -> Result<Fields, Self::Error> {
        Ok(Fields::Null)
    }
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<Fields, Self::Error> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<Fields, Self::Error> {
        Ok(Fields::Null)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<Fields, Self::Error> {
        Ok(Fields::Null)
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<Fields, Self::Error> {
        Ok(Fields::Str(variant.to_string()))
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(self, _: &'static str, value: &T) -> Result<Fields, Self::Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<Fields, Self::Error> {
        Ok(Many::wrap(Some(variant), value.serialize(self)?))
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Many, Self::Error> {
        Ok(Many::new(None))
    }
    fn serialize_tuple(self, _: usize) -> Result<Many, Self::Error> {
        Ok(Many::new(None))
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Many, Self::Error> {
        Ok(Many::new(None))
    }
    fn serialize_tuple_variant(self, _: &'static str, _: u32, variant: &'static str, _: usize) -> Result<Many, Self::Error> {
        Ok(Many::new(Some(variant)))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Many, Self::Error> {
        Ok(Many::new(None))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Many, Self::Error> {
        Ok(Many::new(None))
    }
    fn serialize_struct_variant(self, _: &'static str, _: u32, variant: &'static str, _: usize) -> Result<Many, Self::Error> {
        Ok(Many::new(Some(variant)))
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
            list: vec![0.1, 1e-7, 12345.678, 0.1 + 0.2, 1.0 / 3.0, f64::NAN, 2.0f64.powi(60) + 1.0],
            text: "a \"quoted\" µs",
        };
        let direct = serde_json::to_string_pretty(&v).unwrap();
        assert_eq!(serde_json::to_string_pretty(&Fields::of(&v)).unwrap(), direct);
        assert_eq!(Fields::of(&v).entries()[0].0, "zeta");
        // flattened structs, internally tagged enums (the culprits), f32
        #[derive(Serialize)]
        #[serde(tag = "type", rename_all = "snake_case")]
        enum Who {
            Thread(Inner),
            Process { pid: u32, comm: String },
            Idle,
        }
        #[derive(Serialize)]
        struct Flat {
            #[serde(flatten)]
            inner: Inner,
            who: Vec<Who>,
            small: f32,
        }
        let who = vec![Who::Thread(Inner { tid: 1, name: Some("a".into()) }), Who::Process { pid: 9, comm: "hog".into() }, Who::Idle];
        let flat = Flat { inner: Inner { tid: 2, name: None }, who, small: 0.1 };
        assert_eq!(serde_json::to_string(&Fields::of(&flat)).unwrap(), serde_json::to_string(&flat).unwrap());
    }
}
