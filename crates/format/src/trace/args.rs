//! A call's arguments as the trace holds them: each typed (`Arg`), in the order recorded (`Args`).

use super::*;

/// One argument of a call (a fault's or a recent call's), typed. In the trace each is the JSON
/// value its type gives it; a reader takes the type back from the value's shape.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    Int(i64),
    /// A host scalar's value (`alpha`, `beta`).
    Float(f64),
    /// A complex host scalar: `[re, im]`.
    Complex([f64; 2]),
    /// A pointer, handle or stream: a hex string.
    Address(u64),
    /// An enum's label ("T", "lower", "CUBLAS_COMPUTE_32F", "unknown(9)"), a type's or a
    /// kernel's name: a string.
    Label(String),
    /// A `dim3` (`gridDim`, `blockDim`): `[x, y, z]`.
    Dim3([u32; 3]),
    /// A value of no shape above (null, a number past i64, a newer guard's): kept as read.
    Other(serde_json::Value),
}

impl Arg {
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Self::Int(v) => Some(*v),
            _ => None,
        }
    }

    /// A label's text (an address is not text: see `as_address`).
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::Label(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_address(&self) -> Option<u64> {
        match self {
            Self::Address(v) => Some(*v),
            _ => None,
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        match self {
            Self::Int(v) => json!(v),
            Self::Float(v) => json!(v),
            Self::Complex(v) => json!(v),
            Self::Address(v) => json!(hex(*v)),
            Self::Label(s) => json!(s),
            Self::Dim3(v) => json!(v),
            Self::Other(v) => v.clone(),
        }
    }
}

/// The reader's rule: the type from the value's shape.
impl From<serde_json::Value> for Arg {
    fn from(v: serde_json::Value) -> Self {
        use serde_json::Value;
        match &v {
            Value::Number(n) if n.is_i64() => Self::Int(n.as_i64().unwrap_or_default()),
            Value::Number(n) if n.is_f64() => Self::Float(n.as_f64().unwrap_or_default()),
            Value::String(s) => match s.strip_prefix("0x").filter(|d| (1..=16).contains(&d.len())).and_then(|d| u64::from_str_radix(d, 16).ok()) {
                Some(a) if hex(a) == *s => Self::Address(a),
                _ => Self::Label(s.clone()),
            },
            Value::Array(items) => {
                let dims: Option<Vec<u32>> = items.iter().map(|i| i.as_u64().and_then(|u| u32::try_from(u).ok())).collect();
                let parts: Option<Vec<f64>> = items.iter().map(|i| i.as_f64()).collect();
                match (dims, parts) {
                    (Some(d), _) if d.len() == 3 => Self::Dim3([d[0], d[1], d[2]]),
                    (_, Some(p)) if p.len() == 2 && items.iter().any(Value::is_f64) => Self::Complex([p[0], p[1]]),
                    _ => Self::Other(v),
                }
            }
            _ => Self::Other(v),
        }
    }
}

impl From<i64> for Arg {
    fn from(v: i64) -> Self {
        Self::Int(v)
    }
}

impl From<&str> for Arg {
    fn from(v: &str) -> Self {
        Self::Label(v.into())
    }
}

impl From<String> for Arg {
    fn from(v: String) -> Self {
        Self::Label(v)
    }
}

/// As the report prints it: a label or an address bare, anything else as its JSON.
impl std::fmt::Display for Arg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Label(s) => f.write_str(s),
            Self::Address(a) => write!(f, "{a:#x}"),
            other => write!(f, "{}", other.to_json()),
        }
    }
}

impl PartialEq<serde_json::Value> for Arg {
    fn eq(&self, other: &serde_json::Value) -> bool {
        self.to_json() == *other
    }
}

impl PartialEq<&str> for Arg {
    fn eq(&self, other: &&str) -> bool {
        self.to_json() == *other
    }
}

impl PartialEq<i64> for Arg {
    fn eq(&self, other: &i64) -> bool {
        self.as_i64() == Some(*other)
    }
}

impl PartialEq<f64> for Arg {
    fn eq(&self, other: &f64) -> bool {
        self.to_json() == serde_json::json!(*other)
    }
}

impl PartialEq<u64> for Arg {
    fn eq(&self, other: &u64) -> bool {
        self.to_json() == serde_json::json!(*other)
    }
}

impl PartialEq<i32> for Arg {
    fn eq(&self, other: &i32) -> bool {
        self.as_i64() == Some(*other as i64)
    }
}

impl Serialize for Arg {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Int(v) => serializer.serialize_i64(*v),
            Self::Float(v) => serializer.serialize_f64(*v),
            Self::Complex(v) => v.serialize(serializer),
            Self::Address(v) => serializer.collect_str(&format_args!("{v:#x}")),
            Self::Label(s) => serializer.serialize_str(s),
            Self::Dim3(v) => v.serialize(serializer),
            Self::Other(v) => v.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for Arg {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde_json::Value::deserialize(deserializer).map(Self::from)
    }
}

/// A call's arguments by their names, written in the order the guard gives them (the call's
/// parameters' order); in the trace, a JSON object. Two are equal when they hold the same
/// names with the same values, in any order (a reader gets them back sorted by name).
#[derive(Clone, Debug, Default)]
pub struct Args(Vec<(String, Arg)>);

impl PartialEq for Args {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|(n, v)| other.get(n) == Some(v))
    }
}

impl Args {
    /// Sets `name` (in its place, when it is already there).
    pub fn insert(&mut self, name: &str, value: impl Into<Arg>) {
        let value = value.into();
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some((_, v)) => *v = value,
            None => self.0.push((name.to_string(), value)),
        }
    }

    pub fn get(&self, name: &str) -> Option<&Arg> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// An integer argument (`m`, `lda`, `batchCount`, ...).
    pub fn int(&self, name: &str) -> Option<i64> {
        self.get(name)?.as_i64()
    }

    /// An enum's label (`transa`: "N", "T", "C", ...) or a name.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.get(name)?.as_str()
    }

    /// A pointer, handle or stream.
    pub fn address(&self, name: &str) -> Option<u64> {
        self.get(name)?.as_address()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Arg)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A missing argument reads as null, as in a JSON object.
impl std::ops::Index<&str> for Args {
    type Output = Arg;
    fn index(&self, name: &str) -> &Arg {
        static NULL: Arg = Arg::Other(serde_json::Value::Null);
        self.get(name).unwrap_or(&NULL)
    }
}

impl<N: AsRef<str>, V: Into<Arg>> Extend<(N, V)> for Args {
    fn extend<I: IntoIterator<Item = (N, V)>>(&mut self, items: I) {
        for (n, v) in items {
            self.insert(n.as_ref(), v);
        }
    }
}

impl<N: AsRef<str>, V: Into<Arg>> FromIterator<(N, V)> for Args {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(items: I) -> Self {
        let mut args = Self::default();
        args.extend(items);
        args
    }
}

impl IntoIterator for Args {
    type Item = (String, Arg);
    type IntoIter = std::vec::IntoIter<(String, Arg)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl Serialize for Args {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(n, v)| (n, v)))
    }
}

impl<'de> Deserialize<'de> for Args {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Args;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of arguments")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, mut map: M) -> Result<Args, M::Error> {
                let mut args = Args::default();
                while let Some((name, value)) = map.next_entry::<String, Arg>()? {
                    args.insert(&name, value);
                }
                Ok(args)
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}
