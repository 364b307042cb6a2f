//! The config file: `--config PATH` or `DELAYQ_CONFIG`, a TOML file of
//! settings for one subcommand.
//!
//! ```toml
//! redis-url = "redis://10.0.0.5:6379/0"
//! shards = 16
//! log-json = true
//! ```
//!
//! Keys are the long flags without their dashes (`redis-url`, or
//! `redis_url`), values strings, numbers or booleans. It is read before
//! the command line is parsed: each key whose flag is not on the command
//! line and whose `DELAYQ_*` variable is not set is given to clap as that
//! flag ([`with_settings`]), so the order is flag, then variable, then
//! the file, then the default; the process's environment is left as it
//! is. The file must fit the
//! subcommand it is given to: a key that is no flag, a flag of another
//! subcommand, a flag with no twin (`--expire`, `--dry-run`, `--repair`:
//! actions, not settings), a table or an array, a missing file and a TOML
//! syntax error each stop the program with exit code 2, as a bad flag does,
//! naming the file and the key or line. A value is checked by its flag's
//! own parser where it is used; an invalid one names the key.

use std::collections::BTreeMap;
use std::ffi::OsString;

use clap::parser::ValueSource;
use clap::{Arg, Command};

/// The flag and the environment variable that name the config file.
pub const FLAG: &str = "--config";
pub const VAR: &str = "DELAYQ_CONFIG";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigFileError {
    #[error("config file {path}: cannot read it: {reason}")]
    Read { path: String, reason: String },
    #[error("config file {path}, line {line}, column {column}: not valid TOML: {message}")]
    Syntax {
        path: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("config file {path}: {message}")]
    Key { path: String, message: String },
}

/// What a config file sets: flags and their values, and the keys that
/// set them (to name the file when clap refuses a value).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FromFile {
    pub path: String,
    /// (long flag, value), for the keys whose variable was not set.
    pub settings: Vec<(String, String)>,
    /// Long flag → the key as the file wrote it, for the settings here.
    pub keys: BTreeMap<String, String>,
}

/// The config file named by `args` (`--config PATH`, `--config=PATH`) or
/// by `DELAYQ_CONFIG` in `env`: read, checked against the subcommand in
/// `args`, and turned into the settings to give. None when no file is named,
/// or when `args` names no subcommand (clap then prints help, the version
/// or its own error).
///
/// `cli` must be built ([`Command::build`]), so that global flags are
/// among each subcommand's.
pub fn read(
    cli: &Command,
    args: &[OsString],
    env: impl Fn(&str) -> Option<OsString>,
) -> Result<Option<FromFile>, ConfigFileError> {
    let path = match flag_value(args) {
        Some(p) => p,
        None => match env(VAR).filter(|v| !v.is_empty()) {
            Some(p) => p,
            None => return Ok(None),
        },
    };
    let Some(sub) = subcommand(cli, args) else {
        return Ok(None);
    };
    let shown = path.to_string_lossy().into_owned();
    let text = std::fs::read_to_string(&path).map_err(|e| ConfigFileError::Read {
        path: shown.clone(),
        reason: e.to_string(),
    })?;
    let settings = parse(cli, sub, &shown, &text)?;
    let mut out = FromFile {
        path: shown,
        ..Default::default()
    };
    for (arg, key, value) in settings {
        let var = arg.get_env().expect("settings have a twin");
        if env(&var.to_string_lossy()).is_none() {
            let long = arg.get_long().expect("settings have a long flag");
            out.settings.push((long.to_string(), value));
            out.keys.insert(long.to_string(), key);
        }
    }
    Ok(Some(out))
}

/// `args` with the file's settings that the command line does not give
/// added as flags right after the subcommand's name (before any `--`): a
/// value as `--flag=value`, a switch as `--flag` when the file says true.
/// `cli` must be built, as for [`read`].
pub fn with_settings(cli: &Command, args: &[OsString], from_file: &FromFile) -> Vec<OsString> {
    if from_file.settings.is_empty() {
        return args.to_vec();
    }
    let (Some(at), Some(sub)) = (subcommand_at(args), subcommand(cli, args)) else {
        return args.to_vec();
    };
    let given = cli
        .clone()
        .ignore_errors(true)
        .try_get_matches_from(args)
        .ok();
    let given = given
        .as_ref()
        .and_then(|m| m.subcommand_matches(sub.get_name()));
    let mut added = Vec::new();
    for (long, value) in &from_file.settings {
        let Some(arg) = settings(sub).find(|a| a.get_long() == Some(long.as_str())) else {
            continue;
        };
        let on_command_line = given.is_some_and(|m| {
            m.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine)
        });
        if on_command_line {
            continue;
        }
        if arg.get_action().takes_values() {
            added.push(OsString::from(format!("--{long}={value}")));
        } else if value == "true" {
            added.push(OsString::from(format!("--{long}")));
        }
    }
    let mut out = args[..=at].to_vec();
    out.extend(added);
    out.extend_from_slice(&args[at + 1..]);
    out
}

/// The value of `--config` in `args`, before any `--`.
fn flag_value(args: &[OsString]) -> Option<OsString> {
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        if a == "--" {
            break;
        }
        if a == FLAG {
            return it.next().cloned();
        }
        if let Some(v) = a.to_str().and_then(|s| s.strip_prefix("--config=")) {
            return Some(v.into());
        }
    }
    None
}

/// The subcommand `args` run: the first word that is no flag and no
/// `--config` value.
fn subcommand<'c>(cli: &'c Command, args: &[OsString]) -> Option<&'c Command> {
    cli.find_subcommand(&args[subcommand_at(args)?])
}

/// Where in `args` the subcommand's name stands.
fn subcommand_at(args: &[OsString]) -> Option<usize> {
    let mut i = 1;
    while i < args.len() {
        let a = &args[i];
        if a == FLAG {
            i += 2;
            continue;
        }
        if a == "--" {
            return None;
        }
        if !a.to_string_lossy().starts_with('-') {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// The flags of `sub` a config file may set: a long name and an
/// environment twin (the config flag itself aside).
fn settings(sub: &Command) -> impl Iterator<Item = &Arg> {
    sub.get_arguments()
        .filter(|a| a.get_long().is_some_and(|l| l != "config") && a.get_env().is_some())
}

fn longs(sub: &Command) -> Vec<&str> {
    settings(sub).filter_map(Arg::get_long).collect()
}

/// The file's settings for `sub`: (flag, key as written, value).
fn parse<'c>(
    cli: &Command,
    sub: &'c Command,
    path: &str,
    text: &str,
) -> Result<Vec<(&'c Arg, String, String)>, ConfigFileError> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        let (line, column) = e
            .span()
            .map(|s| line_and_column(text, s.start))
            .unwrap_or((1, 1));
        ConfigFileError::Syntax {
            path: path.to_string(),
            line,
            column,
            message: e.message().trim().to_string(),
        }
    })?;
    let name = sub.get_name();
    let bad = |message: String| ConfigFileError::Key {
        path: path.to_string(),
        message,
    };
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut out = Vec::new();
    for (key, value) in &table {
        let long = key.replace('_', "-");
        if let Some(first) = seen.insert(long.clone(), key.clone()) {
            return Err(bad(format!("`{first}` and `{key}` set the same flag")));
        }
        let Some(arg) = settings(sub).find(|a| a.get_long() == Some(long.as_str())) else {
            let message = if long == "config" {
                format!("`{key}`: a config file cannot name another one")
            } else if sub.get_arguments().any(|a| a.get_long() == Some(&long)) {
                format!("`{key}` is an action, not a setting: give --{long} on the command line")
            } else if let Some(other) = cli
                .get_subcommands()
                .find(|s| settings(s).any(|a| a.get_long() == Some(&long)))
            {
                format!(
                    "`{key}` does not apply to `delayq {name}` (it is a setting of `delayq {}`); \
                     the keys of `delayq {name}` are: {}",
                    other.get_name(),
                    longs(sub).join(", ")
                )
            } else {
                format!(
                    "unknown key `{key}`; the keys of `delayq {name}` are: {}",
                    longs(sub).join(", ")
                )
            };
            return Err(bad(message));
        };
        let value = match value {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => {
                return Err(bad(format!(
                    "`{key}`: a {} is not a value here; give a string, a number or a boolean",
                    other.type_str()
                )))
            }
        };
        // A switch is on or off, as its variable takes it: true or false.
        if !arg.get_action().takes_values() && !matches!(value.as_str(), "true" | "false") {
            return Err(bad(format!(
                "`{key}` is a switch: give true or false, not {value:?}"
            )));
        }
        out.push((arg, key.clone(), value));
    }
    Ok(out)
}

/// 1-based line and column of byte `offset` in `text`.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Cli;
    use clap::CommandFactory;

    fn cli() -> Command {
        let mut c = Cli::command();
        c.build();
        c
    }

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    fn settings_of(sub: &str, text: &str) -> Result<Vec<(String, String)>, ConfigFileError> {
        let cli = cli();
        let sub = cli.find_subcommand(sub).unwrap();
        Ok(parse(&cli, sub, "x.toml", text)?
            .into_iter()
            .map(|(a, _, v)| (a.get_long().unwrap().to_string(), v))
            .collect())
    }

    fn message(e: ConfigFileError) -> String {
        e.to_string()
    }

    #[test]
    fn finds_the_file_and_the_subcommand() {
        let a = args(&["delayq", "--log-json", "--config", "a.toml", "serve"]);
        assert_eq!(flag_value(&a), Some("a.toml".into()));
        assert_eq!(subcommand(&cli(), &a).map(|s| s.get_name()), Some("serve"));
        let a = args(&["delayq", "restore", "--config=b.toml", "--", "--config"]);
        assert_eq!(flag_value(&a), Some("b.toml".into()));
        assert_eq!(
            subcommand(&cli(), &a).map(|s| s.get_name()),
            Some("restore")
        );
        assert_eq!(flag_value(&args(&["delayq", "serve"])), None);
        assert!(subcommand(&cli(), &args(&["delayq", "--version"])).is_none());
    }

    #[test]
    fn keys_are_long_flags_in_either_spelling() {
        let got = settings_of(
            "serve",
            "redis-url = \"redis://h:1/0\"\nkey_prefix = \"p\"\nshards = 16\nlog-json = true\n\
             reconcile-grace = \"5s\"\n",
        )
        .unwrap();
        assert_eq!(
            got,
            [
                ("key-prefix", "p"),
                ("log-json", "true"),
                ("reconcile-grace", "5s"),
                ("redis-url", "redis://h:1/0"),
                ("shards", "16"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
        );
        // Tool subcommands take their own flags and the shared ones.
        assert!(settings_of("reconcile", "reconcile-grace = 1\nshards = 2").is_ok());
        assert!(settings_of("migrate", "database-url = \"sqlite://x\"").is_ok());
    }

    #[test]
    fn refuses_what_does_not_fit() {
        let e = message(settings_of("serve", "sharts = 3").unwrap_err());
        assert!(
            e.contains("x.toml") && e.contains("unknown key `sharts`"),
            "{e}"
        );
        assert!(e.contains("shards"), "lists the keys: {e}");
        let e = message(settings_of("restore", "bind = \"127.0.0.1:1\"").unwrap_err());
        assert!(
            e.contains("`bind` does not apply to `delayq restore`") && e.contains("serve"),
            "{e}"
        );
        let e = message(settings_of("restore", "dry-run = true").unwrap_err());
        assert!(e.contains("action") && e.contains("--dry-run"), "{e}");
        for value in ["\"banana\"", "\"yes\"", "1"] {
            let e = message(settings_of("serve", &format!("ui-read-only = {value}")).unwrap_err());
            assert!(e.contains("a switch: give true or false"), "{value}: {e}");
        }
        assert!(settings_of("serve", "ui-read-only = \"false\"").is_ok());
        let e = message(settings_of("serve", "config = \"other.toml\"").unwrap_err());
        assert!(e.contains("another"), "{e}");
        let e = message(settings_of("serve", "shards = [1, 2]").unwrap_err());
        assert!(e.contains("`shards`") && e.contains("array"), "{e}");
        let e = message(settings_of("serve", "[serve]\nshards = 2").unwrap_err());
        assert!(e.contains("`serve`"), "{e}");
        let e =
            message(settings_of("serve", "key-prefix = \"a\"\nkey_prefix = \"b\"").unwrap_err());
        assert!(e.contains("the same flag"), "{e}");
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let e = settings_of("serve", "shards = 4\n\nbind = 127.0.0.1:7070\n").unwrap_err();
        match e {
            ConfigFileError::Syntax { line, path, .. } => {
                assert_eq!((line, path.as_str()), (3, "x.toml"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn set_twins_are_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.toml");
        std::fs::write(&path, "shards = 3\nkey-prefix = \"file\"\n").unwrap();
        let a = args(&["delayq", "serve", "--config", path.to_str().unwrap()]);
        let env = |v: &str| (v == "DELAYQ_SHARDS").then(|| OsString::from("5"));
        let got = read(&cli(), &a, env).unwrap().unwrap();
        assert_eq!(
            got.settings,
            [("key-prefix".to_string(), "file".to_string())]
        );
        assert_eq!(got.keys.keys().collect::<Vec<_>>(), ["key-prefix"]);
        // Named by the variable instead; missing.
        let a = args(&["delayq", "serve"]);
        let env = |v: &str| (v == VAR).then(|| OsString::from("/nonexistent/delayq.toml"));
        let e = read(&cli(), &a, env).unwrap_err();
        assert!(
            matches!(&e, ConfigFileError::Read { path, .. } if path == "/nonexistent/delayq.toml"),
            "{e:?}"
        );
        assert_eq!(read(&cli(), &a, |_| None), Ok(None));
    }

    #[test]
    fn settings_become_flags_the_command_line_did_not_give() {
        let from_file = FromFile {
            path: "x.toml".into(),
            settings: vec![
                ("shards".into(), "3".into()),
                ("key-prefix".into(), "file".into()),
                ("log-json".into(), "true".into()),
            ],
            ..Default::default()
        };
        let a = args(&["delayq", "--config", "x.toml", "serve", "--shards", "5"]);
        assert_eq!(
            with_settings(&cli(), &a, &from_file),
            args(&[
                "delayq",
                "--config",
                "x.toml",
                "serve",
                "--key-prefix=file",
                "--log-json",
                "--shards",
                "5"
            ])
        );
        let off = FromFile {
            settings: vec![("log-json".into(), "false".into())],
            ..Default::default()
        };
        let a = args(&["delayq", "serve"]);
        assert_eq!(with_settings(&cli(), &a, &off), a);
    }

    /// `delayq.example.toml` lists every key of `delayq serve`, and with
    /// its keys uncommented it is a valid file.
    #[test]
    fn the_example_lists_every_serve_key() {
        let example = include_str!("../../delayq.example.toml");
        let cli = cli();
        let serve = cli.find_subcommand("serve").unwrap();
        for long in longs(serve) {
            assert!(
                example.contains(&format!("\n# {long} = ")),
                "delayq.example.toml lacks `{long}`"
            );
        }
        let uncommented: String = example
            .lines()
            .filter_map(|l| l.strip_prefix("# "))
            .filter(|l| l.split_once(" = ").is_some_and(|(k, _)| !k.contains(' ')))
            .map(|l| format!("{l}\n"))
            .collect();
        let got = parse(&cli, serve, "delayq.example.toml", &uncommented).unwrap();
        assert_eq!(got.len(), longs(serve).len());
    }
}
