//! The login steps, before a connection may run anything else: `-Y`'s
//! text login (a `set` whose data block is `username password`) and `-S`'s
//! binary SASL PLAIN (`LIST_MECHS`, `AUTH`, `STEP`), answered as memcached
//! answers them. The credentials and their checks are `auth.rs`'s
//! (reached through the hooks); this file only frames the requests and
//! writes the replies.

use strata_proto::binary::{self, Opcode};
use strata_proto::{parse_request, Command};

use super::{reply, Admission, Flow, Step};
use crate::output::Output;
use crate::service::hooks::TextLogin;
use crate::service::Service;

/// Before `-Y` authentication only a `set` carrying `username password` is
/// accepted; everything else answers `CLIENT_ERROR unauthenticated`.
pub(super) fn text_login(buf: &[u8], line: &[u8], consumed: usize, svc: &mut Service<'_>, out: &mut Output, unauthenticated: &mut bool) -> Step {
    let Some(credentials) = svc.hooks.auth().text.as_ref() else {
        *unauthenticated = false;
        return Step::next(0);
    };
    let cmd = match parse_request(line, consumed) {
        Command::Store(cmd) if cmd.verb == strata_proto::StoreVerb::Set => cmd,
        Command::Close => return Step::Stop(Flow::Close),
        _ => {
            reply(out, "CLIENT_ERROR unauthenticated", false);
            return Step::next(consumed);
        }
    };
    if let Admission::Refuse { reply: line, .. } = super::admit(svc, cmd.key, cmd.flags, cmd.value_len, false) {
        reply(out, line, false);
        return Step::Done { advance: consumed, swallow: cmd.value_len + 2, outcome: super::Outcome::CONTINUE };
    }
    let end = consumed + cmd.value_len + 2;
    if buf.len() < end {
        return Step::Need(end);
    }
    let (token, tail) = buf[consumed..end].split_at(cmd.value_len);
    let line = if tail != b"\r\n" {
        strata_proto::command::BAD_CHUNK
    } else {
        match credentials.text_login(token) {
            TextLogin::Ok => {
                *unauthenticated = false;
                "STORED"
            }
            TextLogin::BadFormat => "CLIENT_ERROR bad authentication token format",
            TextLogin::Failed => "CLIENT_ERROR authentication failure",
        }
    };
    reply(out, line, false);
    Step::next(end)
}

/// Binary SASL: LIST_MECHS, AUTH and STEP with PLAIN. Until a client has
/// authenticated, any other command but VERSION gets AUTH_ERROR and the
/// connection is closed, as in memcached. None: not a login step (run the
/// command).
pub(super) fn sasl(op: Opcode, req: &binary::Request<'_>, svc: &Service<'_>, out: &mut Output, unauthenticated: &mut bool) -> Option<Step> {
    let credentials = svc.hooks.auth().sasl.as_ref()?;
    let (code, opaque) = (req.header.opcode, req.header.opaque);
    let end = binary::HEADER_LEN + req.header.body_len as usize;
    match op {
        Opcode::SaslListMechs => {
            binary::write_response(out, code, binary::Status::Success, opaque, 0, &[], &[], b"PLAIN");
        }
        Opcode::SaslAuth | Opcode::SaslStep => {
            let ok = op == Opcode::SaslAuth && req.key == b"PLAIN" && credentials.sasl_plain(req.value);
            svc.count_auth(ok);
            if ok {
                *unauthenticated = false;
                binary::write_response(out, code, binary::Status::Success, opaque, 0, &[], &[], b"Authenticated");
            } else {
                binary::write_error(out, code, binary::Status::AuthError, opaque);
            }
        }
        Opcode::Version => return None,
        _ if *unauthenticated => {
            binary::write_error(out, code, binary::Status::AuthError, opaque);
            return Some(Step::then(end, Flow::CloseAfterWrite));
        }
        _ => return None,
    }
    Some(Step::next(end))
}
