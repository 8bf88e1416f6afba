//! Operator commands: `lru_crawler ...`, `lru ...` and `slabs ...`, parsed
//! as memcached 1.6.45's `process_lru_crawler_command`, `process_lru_command`
//! and `process_slabs_command` parse them (token counts first, then a
//! sub-command matched as memcached's `strncmp(token, name, len)` does: the
//! token may be any non-empty prefix of the name, so `lru_crawler c all`
//! is a crawl).
//!
//! Commands that only change a tuning knob memcached's slab allocator has
//! and a segment store has not (`lru tune|mode|temp_ttl`, `slabs automove
//! ...`) are validated exactly and answered here: [`Admin::Reply`].
//!
//! A class list (`crawl`, `metadump`, `mgdump`) is `all`, `hash`, or ids
//! 1..=63 separated by commas (empty items skipped, as `strtok_r` does),
//! kept as a 64-bit mask, so parsing allocates nothing.

use crate::number::{parse_i32, parse_u64};
use crate::text::Tokens;

/// memcached's `MAX_NUMBER_OF_SLAB_CLASSES` (class ids are 1..=63).
pub const MAX_CLASSES: u32 = 64;

/// Which items a crawl or dump visits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Classes {
    /// `all`: every class.
    All,
    /// `hash`: every item, in hash-table order.
    Hash,
    /// Bit `n` set: class `n` (1..=63).
    List(u64),
    /// An id that is not a number in 1..=63: `BADCLASS invalid class id`.
    Bad,
}

impl Classes {
    pub fn parse(spec: &[u8]) -> Classes {
        match spec {
            b"all" => return Classes::All,
            b"hash" => return Classes::Hash,
            _ => {}
        }
        let mut mask = 0u64;
        for id in spec.split(|&b| b == b',').filter(|s| !s.is_empty()) {
            match parse_u64(id) {
                Some(n) if (1..u64::from(MAX_CLASSES)).contains(&n) => mask |= 1 << n,
                _ => return Classes::Bad,
            }
        }
        Classes::List(mask)
    }

    /// Whether items of class `id` are visited.
    pub fn contains(self, id: usize) -> bool {
        match self {
            Classes::All | Classes::Hash => true,
            Classes::List(mask) => id < 64 && mask & (1 << id) != 0,
            Classes::Bad => false,
        }
    }
}

/// A parsed operator command.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Admin {
    /// `lru_crawler crawl <classes>`: reclaim expired items now.
    Crawl(Classes),
    /// `lru_crawler metadump|mgdump <classes>`.
    Dump { mg: bool, classes: Classes },
    /// `lru_crawler tocrawl <n>`.
    Tocrawl(u32),
    /// `lru_crawler sleep <us>` (at most one second).
    Sleep(u32),
    /// `lru_crawler enable|disable`.
    Enable(bool),
    /// `slabs reassign <src> <dst>`.
    Reassign { src: i32, dst: i32 },
    /// A command validated here and answered with this line.
    Reply(&'static str),
    /// `watch [streams]`: a mask of [`watch`] stream bits, or `None` when a
    /// token names no stream (memcached answers `ERROR`, after its `-W`
    /// check).
    Watch(Option<u32>),
    /// `extstore <tunable> <value> [noreply]`: set one of the flash tier's
    /// tunables (`OK`), or `None` when the command is refused (`ERROR`).
    Extstore { set: Option<ExtTunable>, noreply: bool },
    /// `mj <since_unix>`: the keys this node saw changed since then
    /// (Strata's own, docs/COMPATIBILITY.md "Journal").
    Journal { since_unix: u64 },
}

/// `mj <since_unix>`: exactly one number.
pub fn journal(t: &Tokens<'_>) -> Admin {
    match (t.len(), parse_u64(t.get(1))) {
        (2, Some(since_unix)) => Admin::Journal { since_unix },
        _ => Admin::Reply(BAD_FORMAT),
    }
}

/// One tunable `extstore <name> <value>` sets, named as memcached's
/// `ext_*` settings it changes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ExtTunable {
    ItemSize(u32),
    ItemAge(u32),
    LowTtl(u32),
    RecacheRate(u32),
    CompactUnder(u32),
    DropUnder(u32),
    MaxSleep(u32),
    MaxFrag(f64),
    DropUnread(bool),
    /// `free_memchunks <class> <limit>`: deprecated in memcached, accepted
    /// and ignored.
    FreeMemchunks,
}


/// The streams of `watch`, as bits (memcached's `LOG_*` flags).
pub mod watch {
    pub const FETCHERS: u32 = 1 << 0;
    pub const MUTATIONS: u32 = 1 << 1;
    pub const EVICTIONS: u32 = 1 << 2;
    pub const CONNEVENTS: u32 = 1 << 3;
    pub const DELETIONS: u32 = 1 << 4;
    pub const SYSEVENTS: u32 = 1 << 5;
    /// Accepted, never emitted (memcached 1.6.45 logs no raw commands).
    pub const RAWCMDS: u32 = 1 << 6;
    /// The proxy's streams: accepted, never emitted (no proxy in Strata).
    pub const PROXY: u32 = 1 << 7;
}

/// `watch [fetchers|mutations|evictions|connevents|deletions|sysevents|...]`
/// as memcached 1.6.45's `process_watch_command` reads it: no stream means
/// `fetchers`; each token may abbreviate a stream name, tried in
/// memcached's order (`watch r` is `rawcmds`).
pub fn watch(t: &Tokens<'_>) -> Admin {
    if t.len() < 2 {
        return Admin::Watch(Some(watch::FETCHERS));
    }
    const NAMES: [(&[u8], u32); 10] = [
        (b"rawcmds", watch::RAWCMDS),
        (b"evictions", watch::EVICTIONS),
        (b"fetchers", watch::FETCHERS),
        (b"mutations", watch::MUTATIONS),
        (b"sysevents", watch::SYSEVENTS),
        (b"connevents", watch::CONNEVENTS),
        (b"proxyreqs", watch::PROXY),
        (b"proxyevents", watch::PROXY),
        (b"proxyuser", watch::PROXY),
        (b"deletions", watch::DELETIONS),
    ];
    let mut mask = 0;
    for i in 1..t.len() {
        let token = t.get(i);
        match NAMES.iter().find(|(name, _)| abbreviates(token, name)) {
            Some(&(_, bit)) => mask |= bit,
            None => return Admin::Watch(None),
        }
    }
    Admin::Watch(Some(mask))
}

/// `extstore <sub> <value>` as memcached 1.6.45's
/// `process_extstore_command` reads it: at least three tokens, the
/// sub-command matched by prefix in memcached's order (`free_memchunks`
/// only with four tokens), a value that does not parse is `ERROR`; a last
/// token `noreply` silences the reply, refusal included.
pub fn extstore(t: &Tokens<'_>) -> Admin {
    let noreply = t.get(t.len().saturating_sub(1)) == b"noreply";
    Admin::Extstore { set: extstore_tunable(t), noreply }
}

fn extstore_tunable(t: &Tokens<'_>) -> Option<ExtTunable> {
    let (n, sub, arg) = (t.len(), t.get(1), t.get(2));
    if n < 3 {
        return None;
    }
    if abbreviates(sub, b"free_memchunks") && n > 3 {
        let class = u32_token(arg)?;
        u32_token(t.get(3))?;
        return (class < MAX_CLASSES).then_some(ExtTunable::FreeMemchunks);
    }
    type Setter = fn(u32) -> ExtTunable;
    const NAMED: [(&[u8], Setter); 7] = [
        (b"item_size", ExtTunable::ItemSize),
        (b"item_age", ExtTunable::ItemAge),
        (b"low_ttl", ExtTunable::LowTtl),
        (b"recache_rate", ExtTunable::RecacheRate),
        (b"compact_under", ExtTunable::CompactUnder),
        (b"drop_under", ExtTunable::DropUnder),
        (b"max_sleep", ExtTunable::MaxSleep),
    ];
    if let Some(&(_, f)) = NAMED.iter().find(|(name, _)| abbreviates(sub, name)) {
        return u32_token(arg).map(f);
    }
    if abbreviates(sub, b"max_frag") {
        return strtod_token(arg).map(ExtTunable::MaxFrag);
    }
    if abbreviates(sub, b"drop_unread") {
        return u32_token(arg).map(|v| ExtTunable::DropUnread(v != 0));
    }
    None
}

/// `mc_toktod`: `strtod` on the whole token, refused on overflow (ERANGE:
/// `1e400`), while `inf` and `nan` as written are taken.
fn strtod_token(token: &[u8]) -> Option<f64> {
    let v = f64_token(token)?;
    let spelled_infinite = token.iter().any(|b| b.eq_ignore_ascii_case(&b'i'));
    (!v.is_infinite() || spelled_infinite).then_some(v)
}

const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format";

/// memcached's `strncmp(token, name, strlen(token)) == 0`: `token` is a
/// non-empty prefix of `name`.
fn abbreviates(token: &[u8], name: &[u8]) -> bool {
    !token.is_empty() && name.starts_with(token)
}

/// `mc_toktou32`: a decimal that fits in 32 bits.
fn u32_token(token: &[u8]) -> Option<u32> {
    parse_u64(token).and_then(|v| u32::try_from(v).ok())
}

/// `strtod` on a whole token.
fn f64_token(token: &[u8]) -> Option<f64> {
    std::str::from_utf8(token).ok()?.trim_start().parse::<f64>().ok()
}

/// `lru_crawler <sub> [arg]`.
pub fn lru_crawler(t: &Tokens<'_>) -> Admin {
    let (n, sub, arg) = (t.len(), t.get(1), t.get(2));
    if n == 3 {
        if abbreviates(sub, b"crawl") {
            return Admin::Crawl(Classes::parse(arg));
        }
        if abbreviates(sub, b"metadump") {
            return Admin::Dump { mg: false, classes: Classes::parse(arg) };
        }
        if abbreviates(sub, b"mgdump") {
            return Admin::Dump { mg: true, classes: Classes::parse(arg) };
        }
        if abbreviates(sub, b"tocrawl") {
            return u32_token(arg).map_or(Admin::Reply(BAD_FORMAT), Admin::Tocrawl);
        }
        if abbreviates(sub, b"sleep") {
            return match u32_token(arg) {
                None => Admin::Reply(BAD_FORMAT),
                Some(us) if us > 1_000_000 => Admin::Reply("CLIENT_ERROR sleep must be one second or less"),
                Some(us) => Admin::Sleep(us),
            };
        }
        return Admin::Reply("ERROR");
    }
    if n == 2 {
        if abbreviates(sub, b"enable") {
            return Admin::Enable(true);
        }
        if abbreviates(sub, b"disable") {
            return Admin::Enable(false);
        }
    }
    Admin::Reply("ERROR")
}

/// `lru tune|mode|temp_ttl ...`: memcached's segmented-LRU knobs, validated
/// and acknowledged (a segment store has no LRU to tune).
pub fn lru(t: &Tokens<'_>) -> Admin {
    let (n, sub) = (t.len(), t.get(1));
    let reply = if abbreviates(sub, b"tune") && n >= 6 {
        match (u32_token(t.get(2)), u32_token(t.get(3)), f64_token(t.get(4)), f64_token(t.get(5))) {
            (Some(hot), Some(warm), Some(hot_factor), Some(factor)) => {
                if u64::from(hot) + u64::from(warm) > 80 {
                    "ERROR hot and warm pcts must not exceed 80"
                } else if factor <= 0.0 || hot_factor <= 0.0 {
                    "ERROR hot/warm age factors must be greater than 0"
                } else {
                    "OK"
                }
            }
            _ => "ERROR",
        }
    } else if abbreviates(sub, b"mode") && n >= 3 {
        match t.get(2) {
            b"flat" | b"segmented" => "OK",
            _ => "ERROR",
        }
    } else if abbreviates(sub, b"temp_ttl") && n >= 3 {
        if parse_i32(t.get(2)).is_some() {
            "OK"
        } else {
            "ERROR"
        }
    } else {
        "ERROR"
    };
    Admin::Reply(reply)
}

/// `slabs reassign <src> <dst>` and `slabs automove ...`.
pub fn slabs(t: &Tokens<'_>) -> Admin {
    let (n, sub) = (t.len(), t.get(1));
    if n == 4 && abbreviates(sub, b"reassign") {
        return match (parse_i32(t.get(2)), parse_i32(t.get(3))) {
            (Some(src), Some(dst)) => Admin::Reassign { src, dst },
            _ => Admin::Reply(BAD_FORMAT),
        };
    }
    if n >= 3 && abbreviates(sub, b"automove") {
        return Admin::Reply(automove(t));
    }
    Admin::Reply("ERROR")
}

/// `process_slabs_automove_command`.
fn automove(t: &Tokens<'_>) -> &'static str {
    let (n, sub) = (t.len(), t.get(2));
    if abbreviates(sub, b"ratio") || abbreviates(sub, b"freeratio") {
        return if n >= 4 && f64_token(t.get(3)).is_some() { "OK" } else { "ERROR" };
    }
    if abbreviates(sub, b"window") {
        return match u32_token(t.get(3)) {
            _ if n < 4 => BAD_FORMAT,
            None => BAD_FORMAT,
            Some(w) if !(3..=1800).contains(&w) => "CLIENT_ERROR automove window too low or too high",
            Some(_) => "OK",
        };
    }
    match u32_token(sub) {
        None => BAD_FORMAT,
        Some(0..=2) => "OK",
        Some(_) => "ERROR",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str, f: fn(&Tokens<'_>) -> Admin) -> Admin {
        f(&Tokens::split(line.as_bytes()))
    }

    #[test]
    fn class_lists() {
        assert_eq!(Classes::parse(b"all"), Classes::All);
        assert_eq!(Classes::parse(b"hash"), Classes::Hash);
        assert_eq!(Classes::parse(b"1,3"), Classes::List(0b1010));
        assert_eq!(Classes::parse(b"1,"), Classes::List(0b10));
        for bad in ["0", "64", "x", "1,x", "-1"] {
            assert_eq!(Classes::parse(bad.as_bytes()), Classes::Bad, "{bad}");
        }
        assert!(Classes::List(0b10).contains(1) && !Classes::List(0b10).contains(2));
    }

    #[test]
    fn lru_crawler_commands() {
        assert_eq!(parse("lru_crawler crawl 1", lru_crawler), Admin::Crawl(Classes::List(2)));
        assert_eq!(parse("lru_crawler c all", lru_crawler), Admin::Crawl(Classes::All));
        assert_eq!(parse("lru_crawler mgdump hash", lru_crawler), Admin::Dump { mg: true, classes: Classes::Hash });
        assert_eq!(parse("lru_crawler sleep 1000001", lru_crawler), Admin::Reply("CLIENT_ERROR sleep must be one second or less"));
        assert_eq!(parse("lru_crawler sleep x", lru_crawler), Admin::Reply(BAD_FORMAT));
        assert_eq!(parse("lru_crawler tocrawl 5", lru_crawler), Admin::Tocrawl(5));
        assert_eq!(parse("lru_crawler enable", lru_crawler), Admin::Enable(true));
        assert_eq!(parse("lru_crawler crawl", lru_crawler), Admin::Reply("ERROR"));
        assert_eq!(parse("lru_crawler crawlx 1", lru_crawler), Admin::Reply("ERROR"));
    }

    #[test]
    fn extstore_commands() {
        let set = |line: &str| parse(line, extstore);
        let ok = |t| Admin::Extstore { set: Some(t), noreply: false };
        assert_eq!(set("extstore item_size 100"), ok(ExtTunable::ItemSize(100)));
        assert_eq!(set("extstore i 5"), ok(ExtTunable::ItemSize(5)), "a prefix, item_size first");
        assert_eq!(set("extstore item_a 5"), ok(ExtTunable::ItemAge(5)));
        assert_eq!(set("extstore max_frag 0.5"), ok(ExtTunable::MaxFrag(0.5)));
        assert_eq!(set("extstore max_frag -3"), ok(ExtTunable::MaxFrag(-3.0)));
        assert_eq!(set("extstore drop_unread 5"), ok(ExtTunable::DropUnread(true)));
        assert_eq!(set("extstore drop_unread 0"), ok(ExtTunable::DropUnread(false)));
        assert_eq!(set("extstore free 1 2"), ok(ExtTunable::FreeMemchunks));
        assert_eq!(set("extstore item_age 7 noreply"), Admin::Extstore { set: Some(ExtTunable::ItemAge(7)), noreply: true });
        assert_eq!(set("extstore item_age noreply"), Admin::Extstore { set: None, noreply: true });
        for bad in [
            "extstore", "extstore item_size", "extstore max_frag x", "extstore max_frag 1e400", "extstore free 1",
            "extstore free 64 1", "extstore bogus 1", "extstore item_size -1", "extstore item_size 4294967296",
            "extstore item_sizex 1",
        ] {
            assert_eq!(set(bad), Admin::Extstore { set: None, noreply: false }, "{bad}");
        }
    }

    #[test]
    fn lru_and_slabs() {
        assert_eq!(parse("lru tune 10 20 0.1 2", lru), Admin::Reply("OK"));
        assert_eq!(parse("lru tune 50 40 0.1 2", lru), Admin::Reply("ERROR hot and warm pcts must not exceed 80"));
        assert_eq!(parse("lru mode flat", lru), Admin::Reply("OK"));
        assert_eq!(parse("lru mode x", lru), Admin::Reply("ERROR"));
        assert_eq!(parse("lru temp_ttl -1", lru), Admin::Reply("OK"));
        assert_eq!(parse("slabs automove 1", slabs), Admin::Reply("OK"));
        assert_eq!(parse("slabs automove 3", slabs), Admin::Reply("ERROR"));
        assert_eq!(parse("slabs automove x", slabs), Admin::Reply(BAD_FORMAT));
        assert_eq!(parse("slabs automove window 2", slabs), Admin::Reply("CLIENT_ERROR automove window too low or too high"));
        assert_eq!(parse("slabs automove window 1800", slabs), Admin::Reply("OK"));
        assert_eq!(parse("slabs automove freeratio 0.5", slabs), Admin::Reply("OK"));
        assert_eq!(parse("slabs reassign 1 2", slabs), Admin::Reassign { src: 1, dst: 2 });
        assert_eq!(parse("slabs reassign 1", slabs), Admin::Reply("ERROR"));
    }
}
