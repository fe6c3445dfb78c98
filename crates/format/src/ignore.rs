//! Ignore rules (`CUBLASGUARD_IGNORE`): faults a model makes on purpose (masked attention's
//! `-inf`, a `torch.where` that discards a branch) are counted, per rule, instead of stored,
//! printed or dumped, so they do not hide the fault that matters.
//!
//! Rules are separated by `;`; a rule is a comma list of `key=value`, all of which must match:
//! `kind` (a fault kind, `nonfinite_input`), `api` (`cublasGemmEx`), `operand` (`A`: the operand
//! the fault is about), `m`, `n`, `k`, `py` (a `file:line` or a file name suffix matched
//! against the fault's Python frames), and `kernel` (the launched kernel's name, or its start:
//! a kernel that writes `-inf` into attention masks on purpose, in origin mode).

use crate::trace::{Fault, FaultKind};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IgnoreRule {
    /// The rule as written, for the trace and the report.
    pub text: String,
    kind: Option<FaultKind>,
    api: Option<String>,
    operand: Option<String>,
    m: Option<i64>,
    n: Option<i64>,
    k: Option<i64>,
    py: Option<String>,
    kernel: Option<String>,
}

fn kind_named(name: &str) -> Option<FaultKind> {
    serde_json::from_value(serde_json::Value::String(name.to_string())).ok()
}

impl IgnoreRule {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut rule = Self { text: text.trim().to_string(), ..Self::default() };
        let mut any = false;
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (key, value) = item.split_once('=').ok_or_else(|| format!("'{item}' is not key=value"))?;
            let (key, value) = (key.trim(), value.trim());
            if value.is_empty() {
                return Err(format!("'{key}' has no value"));
            }
            let number = || value.parse::<i64>().map_err(|_| format!("{key}={value} is not a whole number"));
            match key {
                "kind" => rule.kind = Some(kind_named(value).ok_or_else(|| format!("kind={value} is not a fault kind"))?),
                "api" => rule.api = Some(value.to_string()),
                "operand" => rule.operand = Some(value.to_string()),
                "m" => rule.m = Some(number()?),
                "n" => rule.n = Some(number()?),
                "k" => rule.k = Some(number()?),
                "py" => rule.py = Some(value.to_string()),
                "kernel" => rule.kernel = Some(value.to_string()),
                other => return Err(format!("unknown key '{other}' (known: kind, api, operand, m, n, k, py, kernel)")),
            }
            any = true;
        }
        if !any {
            return Err("an empty rule would ignore every fault".into());
        }
        Ok(rule)
    }

    /// Whether the rule needs the fault's Python frames to decide.
    pub fn reads_python(&self) -> bool {
        self.py.is_some()
    }

    pub fn matches(&self, fault: &Fault) -> bool {
        let arg = |name: &str| fault.args.get(name).and_then(|v| v.as_i64());
        self.kind.is_none_or(|k| k == fault.kind)
            && self.api.as_ref().is_none_or(|a| *a == fault.api)
            && self.operand.as_ref().is_none_or(|o| about_operand(fault, o))
            && self.m.is_none_or(|m| arg("m") == Some(m))
            && self.n.is_none_or(|n| arg("n") == Some(n))
            && self.k.is_none_or(|k| arg("k") == Some(k))
            && self.kernel.as_ref().is_none_or(|name| fault.args.get("kernel").and_then(|v| v.as_str()).is_some_and(|k| k.starts_with(name.as_str())))
            && self
                .py
                .as_ref()
                .is_none_or(|p| fault.python_stack.iter().any(|f| format!("{}:{}", f.file, f.line).ends_with(p.as_str()) || f.file.ends_with(p.as_str())))
    }
}

/// Whether the fault is about operand `name`: it holds the NaN/Inf, or the message names it.
fn about_operand(fault: &Fault, name: &str) -> bool {
    fault.operands.iter().any(|o| o.name == name && (o.nan.unwrap_or(0) > 0 || o.inf.unwrap_or(0) > 0))
        || fault.message.starts_with(&format!("operand {name} "))
        || fault.message.contains(&format!(" operand {name} "))
}

/// The rules of `CUBLASGUARD_IGNORE`, and a message for each one that cannot be parsed.
pub fn parse_rules(text: &str) -> (Vec<IgnoreRule>, Vec<String>) {
    let mut rules = Vec::new();
    let mut problems = Vec::new();
    for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        match IgnoreRule::parse(part) {
            Ok(rule) => rules.push(rule),
            Err(why) => problems.push(format!("CUBLASGUARD_IGNORE rule '{part}' is ignored: {why}")),
        }
    }
    (rules, problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{sample_fault, Operand, PythonFrame};

    fn nan_in_a() -> Fault {
        let mut f = sample_fault(3);
        f.kind = FaultKind::NonfiniteInput;
        f.api = "cublasGemmEx".into();
        f.message = "operand A (4 x 4 as stored, ld 4) holds 1 NaN".into();
        f.args.insert("m", serde_json::json!(128));
        f.args.insert("n", serde_json::json!(64));
        f.args.insert("k", serde_json::json!(32));
        f.operands.push(Operand {
            name: "A".into(),
            ptr: "0x1".into(),
            dtype: "f16".into(),
            rows: 4,
            cols: 4,
            ld: 4,
            bytes: Some(32),
            allocation: None,
            member_allocation: None,
            scanned: true,
            sampled: false,
            nan: Some(1),
            inf: Some(0),
            first_nonfinite: None,
            batch_count: None,
            stride: None,
            pointer_array: false,
            bad_member: None,
            scan_path: None,
            not_checked: None,
        });
        f.python_stack.push(PythonFrame { file: "/src/model/attention.py".into(), line: 57, function: "forward".into() });
        f
    }

    #[test]
    fn each_key_matches_what_it_names_and_nothing_else() {
        let f = nan_in_a();
        for (rule, expected) in [
            ("kind=nonfinite_input", true),
            ("kind=nonfinite_output", false),
            ("api=cublasGemmEx", true),
            ("api=cublasSgemm_v2", false),
            ("operand=A", true),
            ("operand=B", false),
            ("m=128", true),
            ("m=127", false),
            ("n=64,k=32", true),
            ("k=31", false),
            ("py=attention.py:57", true),
            ("py=attention.py:58", false),
            ("py=attention.py", true),
            ("py=model.py", false),
            ("kind=nonfinite_input,api=cublasSgemm_v2", false),
        ] {
            assert_eq!(IgnoreRule::parse(rule).unwrap().matches(&f), expected, "{rule}");
        }
    }

    #[test]
    fn bad_rules_are_named_and_good_ones_kept() {
        let (rules, problems) = parse_rules("kind=nonfinite_input ; color=blue; m=x;;kind=bogus; api=cublasGemmEx");
        assert_eq!(rules.iter().map(|r| r.text.as_str()).collect::<Vec<_>>(), ["kind=nonfinite_input", "api=cublasGemmEx"]);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].contains("color=blue") && problems[0].contains("unknown key"), "{}", problems[0]);
        assert!(IgnoreRule::parse(" , ").is_err(), "an empty rule would ignore everything");
    }

    #[test]
    fn a_kernel_rule_matches_the_launched_kernels_name_or_its_start() {
        let mut f = sample_fault(9);
        f.kind = FaultKind::NonfiniteOrigin;
        f.api = "cuLaunchKernel".into();
        f.args.insert("kernel", "triton_per_fused_masked_fill_0".to_string());
        assert!(IgnoreRule::parse("kernel=triton_per_fused_masked_fill").unwrap().matches(&f));
        assert!(IgnoreRule::parse("kind=nonfinite_origin,kernel=triton_per_fused_masked_fill_0").unwrap().matches(&f));
        assert!(!IgnoreRule::parse("kernel=softmax").unwrap().matches(&f));
        assert!(!IgnoreRule::parse("kernel=triton").unwrap().matches(&nan_in_a()), "a fault without a kernel never matches");
    }
}
