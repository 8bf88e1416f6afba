//! GNU `getopt_long` as memcached's `main()` uses it, over a table of
//! [`Spec`]s: short flags that bundle (`-vvd`), a short flag's value glued
//! or separate (`-p11211`, `-p 11211`), long names with `=` or a separate
//! value (`--port=11211`, `--port 11211`) and abbreviated to any unique
//! prefix (`--mem 64`), `--` ending the options. Words that are not options
//! are skipped, as memcached (which never reads them) does. A value's
//! leading blanks are dropped, as memcached does with `optarg`.

use super::CliError;

/// Whether a flag takes a value.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Takes {
    Nothing,
    Value,
    /// Only as `--name=value` (getopt's `optional_argument`).
    Optional,
}

/// The `short` of a flag that has only a long name (Strata's `--config`):
/// NUL, which no argument can hold (argv strings end at NUL) and which
/// the short-flag lookup below skips.
pub const LONG_ONLY: char = '\0';

/// One flag of the table.
pub struct Spec {
    pub short: char,
    pub long: Option<&'static str>,
    pub takes: Takes,
}

/// The flags found, in order: the flag's short letter and its value.
pub type Found = Vec<(char, Option<String>)>;

fn invalid(message: String) -> CliError {
    CliError::new(1, message)
}

fn trimmed(value: &str) -> String {
    value.trim_start_matches(|c: char| c.is_ascii_whitespace()).to_string()
}

pub fn parse(specs: &[Spec], args: &[String]) -> Result<Found, CliError> {
    let mut found = Found::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" {
            break;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            let spec = find_long(specs, name)?;
            let full = spec.long.unwrap_or(name);
            let value = match (spec.takes, inline) {
                (Takes::Nothing, Some(_)) => {
                    return Err(invalid(format!("option '--{full}' doesn't allow an argument")))
                }
                (Takes::Nothing, None) | (Takes::Optional, None) => None,
                (_, Some(v)) => Some(trimmed(v)),
                (Takes::Value, None) => {
                    let v = args
                        .get(i)
                        .ok_or_else(|| invalid(format!("option '--{full}' requires an argument")))?;
                    i += 1;
                    Some(trimmed(v))
                }
            };
            found.push((spec.short, value));
            continue;
        }
        let Some(cluster) = arg.strip_prefix('-').filter(|c| !c.is_empty()) else {
            continue; // not an option: memcached ignores it too
        };
        for (at, letter) in cluster.char_indices() {
            let spec = specs
                .iter()
                .find(|s| s.short == letter && s.short != LONG_ONLY)
                .ok_or_else(|| invalid(format!("invalid option -- '{letter}'")))?;
            if spec.takes != Takes::Value {
                found.push((letter, None));
                continue;
            }
            let rest = &cluster[at + letter.len_utf8()..];
            let value = if !rest.is_empty() {
                rest.to_string()
            } else {
                let v = args
                    .get(i)
                    .ok_or_else(|| invalid(format!("option requires an argument -- '{letter}'")))?;
                i += 1;
                v.clone()
            };
            found.push((letter, Some(trimmed(&value))));
            break;
        }
    }
    Ok(found)
}

/// The spec whose long name is `name` or, failing that, the only one it
/// abbreviates.
fn find_long<'a>(specs: &'a [Spec], name: &str) -> Result<&'a Spec, CliError> {
    if let Some(spec) = specs.iter().find(|s| s.long == Some(name)) {
        return Ok(spec);
    }
    let matches: Vec<&Spec> = specs.iter().filter(|s| s.long.is_some_and(|l| l.starts_with(name))).collect();
    match matches.as_slice() {
        [one] if !name.is_empty() => Ok(one),
        [] | [_] => Err(invalid(format!("unrecognized option '--{name}'"))),
        _ => Err(invalid(format!("option '--{name}' is ambiguous"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPECS: &[Spec] = &[
        Spec { short: 'p', long: Some("port"), takes: Takes::Value },
        Spec { short: 'v', long: Some("verbose"), takes: Takes::Optional },
        Spec { short: 'd', long: Some("daemon"), takes: Takes::Nothing },
        Spec { short: 'D', long: None, takes: Takes::Value },
        Spec { short: 'P', long: Some("pidfile"), takes: Takes::Value },
    ];

    fn run(args: &[&str]) -> Result<Found, CliError> {
        parse(SPECS, &args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    fn some(v: &str) -> Option<String> {
        Some(v.to_string())
    }

    #[test]
    fn getopt_long_forms() {
        let found = run(&["-vvd", "-p11", "--port", "12", "--port= 13", "--po=14", "-D", ":", "stray", "--verbose"]).unwrap();
        assert_eq!(
            found,
            vec![
                ('v', None),
                ('v', None),
                ('d', None),
                ('p', some("11")),
                ('p', some("12")),
                ('p', some("13")),
                ('p', some("14")),
                ('D', some(":")),
                ('v', None)
            ]
        );
        assert_eq!(run(&["--", "-x"]).unwrap(), vec![]);
        assert_eq!(run(&["-dp", "-1"]).unwrap(), vec![('d', None), ('p', some("-1"))]);
    }

    #[test]
    fn getopt_errors() {
        assert_eq!(run(&["-x"]).unwrap_err().message, "invalid option -- 'x'");
        assert_eq!(run(&["-p"]).unwrap_err().message, "option requires an argument -- 'p'");
        assert_eq!(run(&["--bogus"]).unwrap_err().message, "unrecognized option '--bogus'");
        assert_eq!(run(&["--p"]).unwrap_err().message, "option '--p' is ambiguous");
        assert_eq!(run(&["--daemon=1"]).unwrap_err().message, "option '--daemon' doesn't allow an argument");
        assert_eq!(run(&["--port"]).unwrap_err().message, "option '--port' requires an argument");
        assert_eq!(run(&["-x"]).unwrap_err().code, 1);
    }
}
