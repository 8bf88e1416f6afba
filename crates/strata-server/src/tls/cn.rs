//! The subject common name (CN) of a DER certificate: memcached's
//! `ssl_get_peer_cn`, without an X.509 library.
//!
//! ```text
//!  Certificate ::= SEQUENCE { tbsCertificate SEQUENCE {
//!      [0] version (optional), serial INTEGER, signature SEQUENCE,
//!      issuer Name, validity SEQUENCE, subject Name, ... } ... }
//!  Name ::= SEQUENCE OF SET OF SEQUENCE { type OID, value String }
//! ```
//!
//! The first attribute of type 2.5.4.3 in the subject is the CN. Every
//! length is checked against what is left: a malformed certificate gives
//! `None`, never a panic (the verifier has already parsed it anyway).

const OID_CN: &[u8] = &[0x55, 0x04, 0x03];

/// One DER element at the front of `der`: (tag, contents, rest).
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |acc, &b| (acc << 8) | b as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

pub fn common_name(cert: &[u8]) -> Option<Box<str>> {
    let (_, cert, _) = element(cert)?;
    let (_, mut tbs, _) = element(cert)?;
    if tbs.first() == Some(&0xa0) {
        tbs = element(tbs)?.2; // [0] version
    }
    for _ in 0..4 {
        tbs = element(tbs)?.2; // serial, signature, issuer, validity
    }
    let (_, mut subject, _) = element(tbs)?;
    while !subject.is_empty() {
        let (_, mut set, rest) = element(subject)?;
        subject = rest;
        while !set.is_empty() {
            let (_, attr, rest) = element(set)?;
            set = rest;
            let (tag, oid, value) = element(attr)?;
            if tag == 0x06 && oid == OID_CN {
                let (_, text, _) = element(value)?;
                return std::str::from_utf8(text).ok().map(Into::into);
            }
        }
    }
    None
}
