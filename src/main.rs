use std::io::IsTerminal;
use std::time::Duration;

use anyhow::Context;
use delayq::config::{Cli, Command};
use delayq::journal::{self, connection::JournalUrl};
use tracing_subscriber::EnvFilter;

/// Runs the command, then ends the process with [`delayq::exit::now`]
/// (exit code 0, or 1 after `Error: …` as a `main` returning an error
/// prints), never through the C library's exit handlers.
fn main() {
    let code = match run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("Error: {e:?}");
            1
        }
    };
    delayq::exit::now(code)
}

fn run() -> anyhow::Result<()> {
    let cli = Cli::load();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(delayq::progress::stderr)
        // Colours on a terminal only: not in log files and pipes.
        .with_ansi(std::io::stderr().is_terminal());
    if cli.log_json {
        logs.json().init();
    } else {
        logs.init();
    }
    // Before anything connects: a CA or key file that cannot be read stops
    // the command here.
    if let Err(e) = delayq::tls::init(&cli.tls.settings()) {
        eprintln!("error: {e:#}");
        delayq::exit::now(2);
    }
    match cli.command {
        Command::Serve(args) => actix_web::rt::System::new().block_on(delayq::node::serve(*args)),
        Command::Migrate(args) => {
            let url = JournalUrl::parse(&args.database_url)?;
            let applied =
                journal::migrate(&url, Duration::from_secs(30)).context("journal migrations")?;
            println!("{{\"applied\":{applied}}}");
            Ok(())
        }
        Command::Restore(args) => {
            let report = actix_web::rt::System::new().block_on(delayq::node::restore(args))?;
            println!("{}", serde_json::to_string(&report)?);
            Ok(())
        }
        Command::Reshard(args) => {
            let report = actix_web::rt::System::new().block_on(delayq::node::reshard(args))?;
            println!("{}", serde_json::to_string(&report)?);
            Ok(())
        }
        Command::Outbox(args) => match args.action {
            delayq::config::OutboxAction::Install => {
                let installed = delayq::outbox::table::install(&args.database_url, &args.table)?;
                println!("{}", serde_json::to_string(&installed)?);
                Ok(())
            }
        },
        Command::Reconcile(args) => {
            let report = actix_web::rt::System::new().block_on(delayq::node::reconcile(args))?;
            println!("{}", serde_json::to_string(&report)?);
            Ok(())
        }
    }
}
