//! Warm-return suboptions (Strata's own, docs/SCALE-OUT.md):
//! `-o journal_size=ENTRIES` (0: off), `restart_max_downtime=SECONDS`,
//! `restart_peers=HOST:PORT,...`, `restart_margin=SECONDS`,
//! `restart_peer_timeout=MILLISECONDS`, `restart_catchup=SECONDS`.

use strata_server::journal::WarmSettings;

use super::{number, CliError};

fn error(message: impl Into<String>) -> CliError {
    CliError::new(1, message)
}

fn value_of<'a>(key: &str, value: Option<&'a str>) -> Result<&'a str, CliError> {
    value.filter(|v| !v.is_empty()).ok_or_else(|| error(format!("Missing {key} argument")))
}

fn count(key: &str, value: Option<&str>) -> Result<u64, CliError> {
    let v = value_of(key, value)?;
    number::<u64>(v).ok_or_else(|| error(format!("could not parse argument to {key}")))
}

/// `-o`'s comma-separated list, as memcached splits it, except that the
/// peers of `restart_peers=A:1,B:2` stay together: a token with no `=`
/// after `restart_peers` that reads as HOST:PORT is one more peer.
pub fn suboptions(list: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for opt in list.split(',').filter(|o| !o.is_empty()) {
        let is_peer = !opt.contains('=') && opt.rsplit_once(':').is_some_and(|(_, port)| port.parse::<u16>().is_ok());
        match out.last_mut() {
            Some(last) if is_peer && last.starts_with("restart_peers=") => {
                last.push(',');
                last.push_str(opt);
            }
            _ => out.push(opt.to_string()),
        }
    }
    out
}

pub fn apply(w: &mut WarmSettings, key: &str, value: Option<&str>) -> Result<(), CliError> {
    match key {
        "journal_size" => {
            let n = count(key, value)?;
            if n > strata_server::journal::MAX_ENTRIES as u64 {
                return Err(error(format!("journal_size must be at most {}", strata_server::journal::MAX_ENTRIES)));
            }
            w.journal_entries = n as usize;
        }
        "restart_max_downtime" => w.max_downtime_s = Some(count(key, value)?),
        "restart_margin" => w.margin_s = count(key, value)?.min(86_400),
        "restart_peer_timeout" => w.peer_timeout_ms = count(key, value)?.clamp(1, 600_000),
        "restart_catchup" => w.catchup_s = count(key, value)?.min(86_400),
        "restart_peers" => {
            let list = value_of(key, value)?;
            w.peers = list.split(',').filter(|p| !p.is_empty()).map(str::to_string).collect();
            if let Some(bad) = w.peers.iter().find(|p| p.rsplit_once(':').is_none_or(|(_, port)| port.parse::<u16>().is_err())) {
                return Err(error(format!("restart_peers: '{bad}' is not HOST:PORT")));
            }
        }
        _ => unreachable!("only the warm-return keys are passed here"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_peer_list_survives_the_comma_split() {
        let got = super::suboptions("journal_size=10,restart_peers=127.0.0.1:1,h:2,restart_margin=3");
        assert_eq!(got, ["journal_size=10", "restart_peers=127.0.0.1:1,h:2", "restart_margin=3"]);
    }
}
