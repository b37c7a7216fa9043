//! The README's table of `tessera serve` flags, rendered from the CLI's own definition (clap),
//! so the two cannot drift apart: the test fails when the table between the README's two marker
//! comments differs from the rendering, and prints the expected table.
//! `UPDATE_README=1 cargo test --release -p tessera readme_flags` rewrites it in place.

use clap::CommandFactory;

const BEGIN: &str = "<!-- serve-flags:begin (generated from the CLI by src/readme_flags.rs: \
                     UPDATE_README=1 cargo test --release -p tessera readme_flags) -->";
const END: &str = "<!-- serve-flags:end -->";

/// One Markdown table cell: no line breaks, no bare `|`.
fn cell(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// `tessera serve`'s flags as a Markdown table: flag, value, default, environment variable,
/// description (clap's help text).
fn render() -> String {
    let mut cli = crate::Cli::command();
    cli.build();
    let serve = cli
        .find_subcommand("serve")
        .expect("the CLI has a serve subcommand");
    let mut out = String::from(
        "| flag | value | default | environment | description |\n|---|---|---|---|---|\n",
    );
    for arg in serve.get_arguments() {
        if matches!(arg.get_id().as_str(), "help" | "version") {
            continue;
        }
        let mut names = Vec::new();
        if let Some(s) = arg.get_short() {
            names.push(format!("`-{s}`"));
        }
        if let Some(l) = arg.get_long() {
            names.push(format!("`--{l}`"));
        }
        if names.is_empty() {
            names.push(format!("`{}`", arg.get_id()));
        }
        let value = if !arg.get_action().takes_values() {
            String::new()
        } else {
            let possible: Vec<String> = arg
                .get_possible_values()
                .iter()
                .filter(|v| !v.is_hide_set())
                .map(|v| v.get_name().to_string())
                .collect();
            if possible.is_empty() {
                let names = arg.get_value_names().map_or_else(
                    || vec![arg.get_id().as_str().to_uppercase()],
                    |v| v.iter().map(ToString::to_string).collect(),
                );
                format!("`{}`", names.join(" "))
            } else {
                format!("`{}`", possible.join("|"))
            }
        };
        let default = arg
            .get_default_values()
            .iter()
            .map(|v| format!("`{}`", v.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(" ");
        let env = arg
            .get_env()
            .map_or(String::new(), |e| format!("`{}`", e.to_string_lossy()));
        let help = arg
            .get_long_help()
            .or(arg.get_help())
            .map_or(String::new(), ToString::to_string);
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            names.join(", "),
            cell(&value),
            cell(&default),
            env,
            cell(&help)
        ));
    }
    out
}

#[test]
fn the_readme_lists_every_serve_flag_as_the_cli_defines_it() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");
    let readme = std::fs::read_to_string(path).expect("README.md is readable");
    let (Some(b), Some(e)) = (readme.find(BEGIN), readme.find(END)) else {
        panic!("README.md lacks the marker lines:\n{BEGIN}\n{END}");
    };
    let start = b + BEGIN.len() + 1;
    let want = render();
    if std::env::var_os("UPDATE_README").is_some() {
        let updated = format!("{}{want}{}", &readme[..start], &readme[e..]);
        std::fs::write(path, updated).expect("README.md is writable");
        return;
    }
    assert!(
        readme.get(start..e) == Some(want.as_str()),
        "README.md's serve flags differ from the CLI's; the table should read (or run \
         UPDATE_README=1 cargo test --release -p tessera readme_flags):\n{want}"
    );
}
