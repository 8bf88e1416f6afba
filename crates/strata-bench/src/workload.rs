//! What a run sends: protocol, key space, value sizes, the get/set mix and
//! the key popularity. Parsed from the command line or taken from a preset
//! (`preset.rs`); the run loop only reads it.

use serde::Serialize;
use std::fmt;

/// Wire protocol. `Udp` is the text protocol over UDP datagrams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Text,
    Meta,
    Binary,
    Udp,
}

impl Protocol {
    pub fn parse(s: &str) -> Result<Protocol, String> {
        Ok(match s {
            "text" | "ascii" => Protocol::Text,
            "meta" => Protocol::Meta,
            "binary" => Protocol::Binary,
            "udp" => Protocol::Udp,
            _ => return Err(format!("unknown protocol {s:?} (text, meta, binary, udp)")),
        })
    }
}

/// Value sizes in bytes: one size, a uniform range, or equally likely
/// classes each a uniform range (`mix` = memcached's object-size study:
/// 4-100 B, 1-2 KiB, 5-20 KiB).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum ValueSize {
    Fixed(u32),
    Range(u32, u32),
    Classes(Vec<(u32, u32)>),
}

impl ValueSize {
    pub const OBJECT_MIX: [(u32, u32); 3] = [(4, 100), (1024, 2048), (5 * 1024, 20 * 1024)];

    pub fn parse(s: &str) -> Result<ValueSize, String> {
        let num = |t: &str| t.trim().parse::<u32>().map_err(|_| format!("bad value size {s:?}"));
        if s == "mix" {
            return Ok(ValueSize::Classes(Self::OBJECT_MIX.to_vec()));
        }
        match s.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("empty value size range {s:?}"));
                }
                Ok(ValueSize::Range(a, b))
            }
            None => Ok(ValueSize::Fixed(num(s)?)),
        }
    }

    fn ranges(&self) -> Vec<(u32, u32)> {
        match self {
            ValueSize::Fixed(n) => vec![(*n, *n)],
            ValueSize::Range(a, b) => vec![(*a, *b)],
            ValueSize::Classes(c) => c.clone(),
        }
    }

    /// Largest size this spec can produce: bounds reply buffers.
    pub fn max(&self) -> u32 {
        self.ranges().iter().map(|r| r.1).max().unwrap_or(0)
    }

    /// Whether a value of `len` bytes could have been written by this spec.
    pub fn allows(&self, len: usize) -> bool {
        // Per returned value: no Vec from `ranges`.
        let within = |&(a, b): &(u32, u32)| (a as usize..=b as usize).contains(&len);
        match self {
            ValueSize::Fixed(n) => within(&(*n, *n)),
            ValueSize::Range(a, b) => within(&(*a, *b)),
            ValueSize::Classes(c) => c.iter().any(within),
        }
    }
}

impl fmt::Display for ValueSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueSize::Fixed(n) => write!(f, "{n}"),
            ValueSize::Range(a, b) => write!(f, "{a}-{b}"),
            ValueSize::Classes(c) => {
                let parts: Vec<String> = c.iter().map(|(a, b)| format!("{a}-{b}")).collect();
                write!(f, "mix({})", parts.join(","))
            }
        }
    }
}

/// Key popularity.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum KeyDist {
    Uniform,
    /// Zipf with exponent `s` over the key ranks.
    Zipf(f64),
}

impl KeyDist {
    pub fn parse(s: &str) -> Result<KeyDist, String> {
        match s.split_once(':') {
            None if s == "uniform" => Ok(KeyDist::Uniform),
            None if s == "zipf" => Ok(KeyDist::Zipf(0.99)),
            Some(("zipf", e)) => match e.parse::<f64>() {
                Ok(e) if e > 0.0 && e.is_finite() => Ok(KeyDist::Zipf(e)),
                _ => Err(format!("bad zipf exponent {e:?}")),
            },
            _ => Err(format!("unknown distribution {s:?} (uniform, zipf:S)")),
        }
    }
}

/// The whole workload.
#[derive(Clone, Debug, Serialize)]
pub struct Workload {
    pub protocol: Protocol,
    pub key_count: u32,
    /// The keys are `key_offset..key_offset + key_count` (e.g. keys another
    /// run never set, for misses).
    pub key_offset: u32,
    pub key_size: usize,
    pub value_size: ValueSize,
    /// Fraction of requests that are gets (the rest are sets).
    pub get_ratio: f64,
    /// Keys per get: 1 is a plain get, more is a multi-get.
    pub mget: usize,
    pub dist: KeyDist,
}

impl Workload {
    /// Keys `0..key_end()` are valid indices (the last one drawn is `key_end() - 1`).
    pub fn key_end(&self) -> u32 {
        self.key_offset.saturating_add(self.key_count)
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.key_count == 0 {
            return Err("--keys must be at least 1".into());
        }
        if self.key_offset.checked_add(self.key_count).is_none() {
            return Err("--key-offset plus --keys must be at most 4294967295".into());
        }
        let digits = (self.key_end() - 1).to_string().len();
        if self.key_size < digits || self.key_size > 250 {
            return Err(format!("--key-size must be {digits}..=250 for keys up to {}", self.key_end() - 1));
        }
        if !(0.0..=1.0).contains(&self.get_ratio) {
            return Err("--get-ratio must be within 0..=1".into());
        }
        if self.mget == 0 || self.mget > 1000 {
            return Err("--mget must be 1..=1000".into());
        }
        if self.protocol == Protocol::Udp && self.value_size.max() > 1300 {
            return Err("over UDP a set must fit one datagram: values up to 1300 bytes".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes_and_distributions() {
        assert_eq!(ValueSize::parse("100"), Ok(ValueSize::Fixed(100)));
        assert_eq!(ValueSize::parse("4-100"), Ok(ValueSize::Range(4, 100)));
        assert!(ValueSize::parse("9-3").is_err());
        let mix = ValueSize::parse("mix").unwrap();
        assert_eq!(mix.max(), 20 * 1024);
        assert!(mix.allows(4) && mix.allows(1500) && !mix.allows(200) && !mix.allows(3000));
        assert_eq!(KeyDist::parse("zipf:0.99"), Ok(KeyDist::Zipf(0.99)));
        assert_eq!(KeyDist::parse("uniform"), Ok(KeyDist::Uniform));
        assert!(KeyDist::parse("zipf:-1").is_err());
        assert_eq!(Protocol::parse("binary"), Ok(Protocol::Binary));
    }

    #[test]
    fn key_offset_moves_the_key_range() {
        let w = Workload {
            protocol: Protocol::Text,
            key_count: 1_000_000,
            key_offset: 300_000_000,
            key_size: 20,
            value_size: ValueSize::Fixed(64),
            get_ratio: 1.0,
            mget: 1,
            dist: KeyDist::Uniform,
        };
        assert_eq!(w.key_end(), 301_000_000);
        assert!(w.validate().is_ok());
        // Nine digits do not fit a key of eight bytes.
        assert!(Workload { key_size: 8, ..w.clone() }.validate().is_err());
        assert!(Workload { key_offset: u32::MAX - 10, ..w }.validate().is_err());
    }
}
