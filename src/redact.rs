//! Secrets never reach a trace: an environment variable or a command-line option whose name
//! looks like it holds a credential keeps its name, and its value becomes `<redacted>`.

pub const REDACTED: &str = "<redacted>";

/// Parts of a name that mark a credential (matched case-insensitively).
const MARKERS: &[&str] = &["KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH"];

/// Whether a variable or option named `name` may hold a secret.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    MARKERS.iter().any(|m| upper.contains(m))
}

/// The program's arguments with the values of secret-looking options replaced:
/// `--api-token=abc` becomes `--api-token=<redacted>`, and in `--password abc` the next
/// argument goes. The program's name (`argv[0]`) is kept.
pub fn redact_argv(argv: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len());
    let mut hide_next = false;
    for (i, arg) in argv.iter().enumerate() {
        if hide_next {
            out.push(REDACTED.to_string());
            hide_next = false;
            continue;
        }
        let option = i > 0 && arg.starts_with('-');
        match arg.split_once('=') {
            Some((name, _)) if option && is_secret_name(name) => out.push(format!("{name}={REDACTED}")),
            None if option && is_secret_name(arg) => {
                out.push(arg.clone());
                hide_next = true;
            }
            _ => out.push(arg.clone()),
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
        let argv: Vec<String> = ["train.py", "--api-token=s3cr3t", "--password", "hunter2", "--lr=0.1", "--batch", "32", "token.txt"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            redact_argv(&argv),
            ["train.py", "--api-token=<redacted>", "--password", "<redacted>", "--lr=0.1", "--batch", "32", "token.txt"]
        );
    }
}
