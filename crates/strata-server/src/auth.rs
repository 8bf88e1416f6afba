//! Authentication's state: the credentials for text-protocol login (`-Y
//! FILE`) and binary SASL PLAIN (`-S` with `-o sasl_pwdb=FILE` or
//! `MEMCACHED_SASL_PWDB`), and the checks of a login (the login steps
//! themselves, framing and replies, are the front end's: `front/auth.rs`).
//!
//! Both files hold `user:password` lines, as memcached's auth file and its
//! SASL pwdb do; blank lines are skipped. The table is reloaded on SIGHUP
//! ([`Credentials::reload`]) and swapped whole, so a request sees either the
//! old or the new table. Passwords are compared in constant time.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

/// Largest credentials file read (memcached's auth file is small too).
const MAX_FILE_BYTES: u64 = 1 << 20;

/// The authentication feature: `-Y`'s and `-S`'s credentials (either may
/// be off).
#[derive(Default)]
pub struct Auth {
    /// `-Y` credentials.
    pub text: Option<Credentials>,
    /// `-S` credentials.
    pub sasl: Option<Credentials>,
}

impl Auth {
    /// The credential files the settings name, loaded.
    pub fn load(settings: &crate::settings::Settings) -> io::Result<Auth> {
        let text = settings.auth_file.as_deref().map(Credentials::load).transpose()?;
        let sasl = match (&settings.sasl, &settings.sasl_pwdb) {
            (false, _) => None,
            (true, Some(path)) => Some(Credentials::load(path)?),
            (true, None) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "SASL (-S) needs a password file: -o sasl_pwdb=FILE or MEMCACHED_SASL_PWDB",
                ))
            }
        };
        Ok(Auth { text, sasl })
    }

    /// Whether new connections start unauthenticated.
    pub fn required(&self) -> bool {
        self.text.is_some() || self.sasl.is_some()
    }

    /// Re-read the credential files (SIGHUP); one line per file.
    pub fn reload(&self) -> Vec<String> {
        let mut report = Vec::new();
        for creds in self.text.iter().chain(self.sasl.iter()) {
            report.push(match creds.reload() {
                Ok(users) => format!("reloaded {} ({users} users)", creds.path().display()),
                Err(e) => format!("kept the old table: cannot reload {}: {e}", creds.path().display()),
            });
        }
        report
    }
}

pub struct Credentials {
    path: PathBuf,
    table: RwLock<BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl Credentials {
    pub fn load(path: &Path) -> io::Result<Credentials> {
        let table = read_table(path)?;
        Ok(Credentials { path: path.to_path_buf(), table: RwLock::new(table) })
    }

    /// Re-read the file; on error keep the current table and return it.
    pub fn reload(&self) -> io::Result<usize> {
        let table = read_table(&self.path)?;
        let users = table.len();
        *self.table.write().unwrap_or_else(|e| e.into_inner()) = table;
        Ok(users)
    }

    /// A table from a file's bytes, as if read from `path` (named in errors).
    pub fn from_bytes(path: &Path, data: &[u8]) -> io::Result<Credentials> {
        let table = parse_table(path, data)?;
        Ok(Credentials { path: path.to_path_buf(), table: RwLock::new(table) })
    }

    pub fn check(&self, user: &[u8], password: &[u8]) -> bool {
        let table = self.table.read().unwrap_or_else(|e| e.into_inner());
        match table.get(user) {
            Some(expected) => constant_time_eq(expected, password),
            None => {
                // Spend the same time on unknown users.
                let _ = constant_time_eq(password, password);
                false
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn read_table(path: &Path) -> io::Result<BTreeMap<Vec<u8>, Vec<u8>>> {
    let meta = std::fs::metadata(path)?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "credentials file larger than 1 MiB"));
    }
    parse_table(path, &std::fs::read(path)?)
}

fn parse_table(path: &Path, data: &[u8]) -> io::Result<BTreeMap<Vec<u8>, Vec<u8>>> {
    let mut table = BTreeMap::new();
    for (number, line) in data.split(|&b| b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}:{}: expected user:password", path.display(), number + 1),
            ));
        };
        table.insert(line[..colon].to_vec(), line[colon + 1..].to_vec());
    }
    Ok(table)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    for (x, y) in a.iter().zip(b.iter()) {
        diff |= x ^ y;
    }
    diff == 0
}

/// Outcome of a text-protocol login (`set <any> 0 0 <n>` + `user pass`).
pub enum TextLogin {
    Ok,
    BadFormat,
    Failed,
}

impl Credentials {
    /// Check a `-Y` login token: `username password`.
    pub fn text_login(&self, token: &[u8]) -> TextLogin {
        let Some(space) = token.iter().position(|&b| b == b' ') else { return TextLogin::BadFormat };
        if self.check(&token[..space], &token[space + 1..]) {
            TextLogin::Ok
        } else {
            TextLogin::Failed
        }
    }

    /// Check a SASL PLAIN message: `[authzid] NUL user NUL password`.
    pub fn sasl_plain(&self, message: &[u8]) -> bool {
        let mut parts = message.splitn(3, |&b| b == 0);
        let (Some(_authzid), Some(user), Some(password)) = (parts.next(), parts.next(), parts.next()) else {
            return false;
        };
        self.check(user, password)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logins() {
        let path = std::env::temp_dir().join(format!("strata-auth-unit-{}", std::process::id()));
        std::fs::write(&path, "alice:secret\n\nbob:hunter2:x\r\n").unwrap();
        let creds = Credentials::load(&path).unwrap();
        assert!(matches!(creds.text_login(b"alice secret"), TextLogin::Ok));
        assert!(matches!(creds.text_login(b"alice wrong"), TextLogin::Failed));
        assert!(matches!(creds.text_login(b"nobody"), TextLogin::BadFormat));
        assert!(creds.sasl_plain(b"\0bob\0hunter2:x"));
        assert!(!creds.sasl_plain(b"\0bob\0hunter2"));
        std::fs::write(&path, "carol:pw\n").unwrap();
        assert_eq!(creds.reload().unwrap(), 1);
        assert!(!creds.check(b"alice", b"secret"));
        assert!(creds.check(b"carol", b"pw"));
        std::fs::write(&path, "no colon here\n").unwrap();
        assert!(creds.reload().is_err());
        assert!(creds.check(b"carol", b"pw"), "a bad file keeps the old table");
        let _ = std::fs::remove_file(&path);
    }
}
