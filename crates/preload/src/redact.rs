//! Secrets never reach a trace: an environment variable or a command-line option whose name
//! looks like it holds a credential keeps its name, and its value becomes `<redacted>`; so do
//! Hydra/OmegaConf overrides (`wandb.api_key=...`, `+db.password=...`), and the password of a
//! URL anywhere in an argument or a recorded variable (`postgres://user:<redacted>@host`).

#![forbid(unsafe_code)]

pub const REDACTED: &str = "<redacted>";

/// Parts of a name that mark a credential (matched case-insensitively).
const MARKERS: &[&str] = &["KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH"];
/// Whole words of a name (split at `-`, `_`, `.`) that mark a password: `--pass`, `--pw`, `db_pwd`.
const WORDS: &[&str] = &["PASS", "PW", "PWD", "PASSPHRASE"];

/// Whether a variable or option named `name` may hold a secret.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    MARKERS.iter().any(|m| upper.contains(m)) || upper.split(['-', '_', '.', '/']).any(|w| WORDS.contains(&w))
}

/// Whether a short option names a password: `-p` (mysql, and many tools after it).
fn is_secret_short_option(arg: &str) -> bool {
    arg == "-p"
}

/// Whether `name` (of `name=value`, no leading dash) is a Hydra/OmegaConf override key:
/// a dotted path of identifiers, with Hydra's `+`, `++` or `~` in front.
fn is_override_key(name: &str) -> bool {
    let key = name.trim_start_matches(['+', '~']);
    !key.is_empty()
        && key.split('.').all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '@' || c == '/'))
}

/// `text` with the password of every URL in it replaced: `scheme://user:PW@host` becomes
/// `scheme://user:<redacted>@host` (the user and the host are kept).
pub fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        // The authority and whatever follows it, up to the next blank.
        let end = tail.find(char::is_whitespace).unwrap_or(tail.len());
        let segment = &tail[..end];
        match (segment.find(':'), segment.rfind('@')) {
            (Some(colon), Some(at)) if colon < at && !segment[..colon].contains('/') => {
                out.push_str(&segment[..=colon]);
                out.push_str(REDACTED);
                out.push_str(&segment[at..]);
            }
            _ => out.push_str(segment),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// A recorded environment variable's value as the trace keeps it.
pub fn redact_variable(name: &str, value: &str) -> String {
    if is_secret_name(name) {
        REDACTED.to_string()
    } else {
        redact_urls(value)
    }
}

/// The program's arguments with the values of secret-looking options replaced:
/// `--api-token=abc` becomes `--api-token=<redacted>`, and in `--password abc` (and `-p abc`)
/// the next argument goes; `db.password=x` and `+wandb.api_key=x` (Hydra overrides) keep
/// their keys, and a URL's password goes wherever it is. The program's name (`argv[0]`) is kept.
pub fn redact_argv(argv: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len());
    let mut hide_next = false;
    for (i, arg) in argv.iter().enumerate() {
        if hide_next {
            out.push(REDACTED.to_string());
            hide_next = false;
            continue;
        }
        if i == 0 {
            out.push(arg.clone());
            continue;
        }
        let option = arg.starts_with('-');
        match arg.split_once('=') {
            Some((name, _)) if (option || is_override_key(name)) && is_secret_name(name) => out.push(format!("{name}={REDACTED}")),
            None if option && (is_secret_name(arg) || is_secret_short_option(arg)) => {
                out.push(arg.clone());
                hide_next = true;
            }
            _ => out.push(redact_urls(arg)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_names_are_recognised_in_any_case() {
        for name in ["NVIDIA_API_KEY", "TORCH_HUB_TOKEN", "hf_token", "DB_PASSWORD", "MY_PASSWD", "AWS_SECRET_ACCESS_KEY", "GOOGLE_CREDENTIALS", "WANDB_AUTH"] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in ["CUDA_VISIBLE_DEVICES", "TORCH_BLAS_PREFER_CUBLASLT", "LD_PRELOAD", "RANK"] {
            assert!(!is_secret_name(name), "{name}");
        }
    }

    #[test]
    fn secret_options_lose_their_values_in_both_spellings() {
        let argv: Vec<String> =
            ["train.py", "--api-token=s3cr3t", "--password", "hunter2", "--lr=0.1", "--batch", "32", "token.txt"].iter().map(|s| s.to_string()).collect();
        assert_eq!(redact_argv(&argv), ["train.py", "--api-token=<redacted>", "--password", "<redacted>", "--lr=0.1", "--batch", "32", "token.txt"]);
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn hydra_and_omegaconf_overrides_keep_their_keys_and_lose_secret_values() {
        let argv = strings(&[
            "train.py",
            "wandb.api_key=abc123",
            "+db.password=hunter2",
            "++auth.token=t0k",
            "~x.secret=s",
            "db.password=x",
            "model.lr=0.1",
            "data.path=/keys/a",
        ]);
        assert_eq!(
            redact_argv(&argv),
            [
                "train.py",
                "wandb.api_key=<redacted>",
                "+db.password=<redacted>",
                "++auth.token=<redacted>",
                "~x.secret=<redacted>",
                "db.password=<redacted>",
                "model.lr=0.1",
                "data.path=/keys/a"
            ]
        );
    }

    #[test]
    fn url_passwords_go_in_arguments_and_variables_and_users_and_hosts_stay() {
        let argv =
            strings(&["prog", "postgres://user:PW@host/db", "--db=mysql://root:pa/ss@10.0.0.1:3306/x", "http://host/a:b@c", "see https://example.com:443/x"]);
        assert_eq!(
            redact_argv(&argv),
            [
                "prog",
                "postgres://user:<redacted>@host/db",
                "--db=mysql://root:<redacted>@10.0.0.1:3306/x",
                "http://host/a:b@c",
                "see https://example.com:443/x"
            ]
        );
        assert_eq!(redact_variable("TORCH_DIST_URL", "tcp://admin:PW@10.1.2.3:29500"), "tcp://admin:<redacted>@10.1.2.3:29500");
        assert_eq!(redact_variable("NCCL_X", "redis://:PW@h a://u:q@h2"), "redis://:<redacted>@h a://u:<redacted>@h2");
        assert_eq!(redact_variable("CUDA_VISIBLE_DEVICES", "0,1"), "0,1");
        assert_eq!(redact_variable("NVIDIA_API_KEY", "nvapi-1"), REDACTED);
    }

    #[test]
    fn short_and_abbreviated_password_options_lose_their_values() {
        let argv = strings(&["prog", "-p", "X", "--pass", "Y", "--pw=Z", "--db-pwd", "W", "--port", "8080", "-n", "3"]);
        assert_eq!(
            redact_argv(&argv),
            ["prog", "-p", "<redacted>", "--pass", "<redacted>", "--pw=<redacted>", "--db-pwd", "<redacted>", "--port", "8080", "-n", "3"]
        );
        for name in ["DB_PW", "SMTP_PASS", "x.pwd"] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in ["PASSES", "COMPASS", "BYPASS_CACHE", "PWR"] {
            assert!(!is_secret_name(name), "{name}");
        }
    }

    #[test]
    fn the_program_name_is_kept_even_when_it_looks_like_a_secret() {
        assert_eq!(redact_argv(&strings(&["/opt/key=1", "-p"])), ["/opt/key=1", "-p"]);
    }
}
