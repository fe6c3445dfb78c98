//! The crates' layers, checked in their parsed sources: each crate's module graph (which module
//! names which, by its `use` items and the paths in its code) is built with a Rust parser, and
//! on it the preload library's policy modules (guard, check, session, the recorder, redaction)
//! never import from the FFI edge (through lib.rs's re-exports, only the known edges), the
//! command's modules import in no circle, and the guard's circles are the known ones. The policy
//! modules forbid unsafe code, and the command never uses the preload library's code.
//!
//! What the parser does not see: code that a macro generates (a `macro_rules!` body, a macro's
//! arguments and an attribute's are read as tokens, so the paths of two segments or more
//! written in them count, but items a macro makes are not modules here), paths inside
//! strings (`#[serde(with = "...")]`), and types used without being named (a value whose
//! type another module defines, a method called on it). `#[path]` and `include!` of Rust are
//! refused, not followed. The names a `use` inside a function binds are not followed (the
//! `use` itself is an edge).
//!
//! An edge is a path in one file module that names another, test code's included; a `mod`
//! declaration is none. So a child's `super::Call` is an edge to its parent, and the parent's
//! `child::f()` one to the child: the two make a circle. A name re-exported by a `use` counts
//! as the module it really comes from.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

use crate::common::manifest_dir;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The preload library's policy modules: safe Rust that never names the FFI edge.
const POLICY: &[&str] = &["guard", "check", "session", "recorder", "redact"];

/// The guard's policy modules' edges into `ffi` that go through a re-export of lib.rs. None
/// since the hook list moved into a leaf of its own (`hook_list.rs`, issue 48): `crate::Hook`,
/// `crate::HOOK_NAMES` and `crate::HOOK_COUNT` come from there, not from the edge. The check
/// wants the list exact: a new edge fails, and one that goes must be taken off.
const KNOWN_BACK_EDGES_THROUGH_REEXPORTS: &[(&str, &str)] = &[];

/// The guard's circles today, each a set of modules that reach one another by their imports:
/// debt of issue 48, which breaks them. Exact as the back edges are: a new circle, or a module
/// joining one, fails, and one broken must be taken off. (Until the hook list moved into a leaf
/// the first three were one circle of 41 modules: the guard named the list in the edge.)
const KNOWN_GUARD_CIRCLES: &[&[&str]] = &[
    // The edge's modules call one another both ways: host::lifecycle and its threads,
    // cuda_client::device and the breadcrumbs, the hooks (their lean path and guarded copies
    // included) and the real-function lookup.
    &[
        "ffi::cuda_client::breadcrumbs",
        "ffi::cuda_client::cuda_api",
        "ffi::cuda_client::cudnn",
        "ffi::cuda_client::device",
        "ffi::cuda_client::device_scan",
        "ffi::cuda_client::verdict_memory",
        "ffi::host::backtrace",
        "ffi::host::claim",
        "ffi::host::crash",
        "ffi::host::environment",
        "ffi::host::harvester",
        "ffi::host::lifecycle",
        "ffi::host::nvml",
        "ffi::host::python",
        "ffi::host::python_internals",
        "ffi::host::snapshot",
        "ffi::host::watchdog",
        "ffi::intercept::dl",
        "ffi::intercept::entry_points",
        "ffi::intercept::hooks",
        "ffi::intercept::hooks::copies",
        "ffi::intercept::hooks::lean",
        "ffi::intercept::real",
    ],
    // The guard's children use guard/mod.rs (`super::Call`) while it uses them; inside are the
    // circles the issue names, guard::operand_call <-> guard::verdicts and
    // guard::attribution <-> guard::launch <-> guard::launch_pointers.
    &[
        "guard",
        "guard::attribution",
        "guard::dump",
        "guard::gemm",
        "guard::graphs",
        "guard::launch",
        "guard::launch_pointers",
        "guard::operand_call",
        "guard::origin",
        "guard::parameters",
        "guard::sync",
        "guard::verdicts",
        "guard::verdicts::quick",
        "guard::verdicts::recording",
        "guard::verdicts::replay",
    ],
    // session/mod.rs keeps the faults (session::faults), which name the session's types.
    &["session", "session::faults"],
    // check/mod.rs's Device trait names check::cudnn's types; cudnn.rs and the model device
    // (model.rs) implement or use the trait, and cudnn.rs's tests use the model device.
    &["check", "check::cudnn", "check::model"],
    // The operand checks' children use check/operand_call/mod.rs's OperandCallCheck, and it
    // uses (and re-exports) theirs.
    &["check::operand_call", "check::operand_call::bounds", "check::operand_call::nonfinite", "check::operand_call::vouch"],
];

/// A module's path from its crate's root: empty for the root, `["guard", "operand_call"]`.
type ModulePath = Vec<String>;

fn shown(path: &[String]) -> String {
    if path.is_empty() {
        "crate".into()
    } else {
        path.join("::")
    }
}

/// A path as written: its segments, and whether it began with `::` (another crate's).
#[derive(Clone, Debug)]
struct Written {
    segments: Vec<String>,
    global: bool,
}

/// One module as parsed: a file, or an inline `mod x { ... }` in one.
#[derive(Default, Debug)]
struct Module {
    /// The file module that holds its code (itself, for a file): the graph's node.
    file: ModulePath,
    children: BTreeSet<String>,
    /// The names its own `use` items bind (a re-export included), each to the path it names.
    bindings: BTreeMap<String, Written>,
}

/// A path named in a module's code or `use` items, and where.
#[derive(Debug)]
struct Reference {
    module: ModulePath,
    path: Written,
    at: String,
}

/// One module naming another (file modules both), and where it does: `via`, the first module
/// whose `use` item (a re-export) the path went through to get there, where it did.
#[derive(Clone, Debug)]
struct Edge {
    from: ModulePath,
    to: ModulePath,
    via: Option<ModulePath>,
    at: String,
    path: String,
}

impl Edge {
    fn describe(&self) -> String {
        let via = self.via.as_ref().map(|v| format!(", through a `use` in {}", shown(v))).unwrap_or_default();
        format!("{} -> {}: `{}` at {}{via}", shown(&self.from), shown(&self.to), self.path, self.at)
    }
}

/// A crate's modules and every path their code names.
#[derive(Default)]
struct ModuleGraph {
    modules: BTreeMap<ModulePath, Module>,
    references: Vec<Reference>,
    /// The files read, as `source` named them.
    files: Vec<String>,
}

/// The source of the file module at a path: its text and its name for messages, None if there
/// is no such file.
type Sources<'a> = &'a dyn Fn(&[String]) -> Option<(String, String)>;

/// Every path a `use` tree names, with the name it binds (none for a glob or `_`).
fn flatten_use(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, Option<String>)>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten_use(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) if n.ident == "self" => out.push((prefix.clone(), prefix.last().cloned())),
        syn::UseTree::Name(n) => out.push(([prefix.as_slice(), &[n.ident.to_string()]].concat(), Some(n.ident.to_string()))),
        syn::UseTree::Rename(r) => {
            let path = if r.ident == "self" { prefix.clone() } else { [prefix.as_slice(), &[r.ident.to_string()]].concat() };
            out.push((path, (r.rename != "_").then(|| r.rename.to_string())));
        }
        syn::UseTree::Glob(_) => out.push((prefix.clone(), None)),
        syn::UseTree::Group(g) => g.items.iter().for_each(|t| flatten_use(t, prefix, out)),
    }
}

/// The paths in one item's code: every `syn::Path` (expressions, types, patterns, traits,
/// attributes), every `use` inside it, and the paths in macro tokens.
struct PathCollector<'a> {
    module: &'a [String],
    file: &'a str,
    out: &'a mut Vec<Reference>,
}

impl PathCollector<'_> {
    fn push(&mut self, segments: Vec<String>, global: bool, line: usize) {
        self.out.push(Reference { module: self.module.to_vec(), path: Written { segments, global }, at: format!("{}:{line}", self.file) });
    }

    /// Paths in a macro's tokens: an identifier (or `$crate`) followed by `::` and more.
    fn scan(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let colon = |i: usize| matches!(trees.get(i), Some(TokenTree::Punct(p)) if p.as_char() == ':');
        let ident = |i: usize| match trees.get(i) {
            Some(TokenTree::Ident(id)) => Some(id.clone()),
            _ => None,
        };
        let mut i = 0;
        while i < trees.len() {
            let (first, mut next) = match &trees[i] {
                TokenTree::Group(g) => {
                    self.scan(g.stream());
                    i += 1;
                    continue;
                }
                TokenTree::Punct(p) if p.as_char() == '$' => match ident(i + 1) {
                    Some(id) if id == "crate" => (id, i + 2),
                    // A metavariable: what it stands for is not known here.
                    Some(_) => {
                        i += 2;
                        continue;
                    }
                    // A repetition, `$( ... )*`: its tokens are read next.
                    None => {
                        i += 1;
                        continue;
                    }
                },
                TokenTree::Ident(id) => (id.clone(), i + 1),
                _ => {
                    i += 1;
                    continue;
                }
            };
            let global = i >= 2 && colon(i - 1) && colon(i - 2);
            let mut segments = vec![first.to_string()];
            while colon(next) && colon(next + 1) {
                let Some(id) = ident(next + 2) else { break };
                segments.push(id.to_string());
                next += 3;
            }
            if segments.len() > 1 && !global {
                self.push(segments, false, first.span().start().line);
            }
            i = next;
        }
    }
}

impl<'ast> Visit<'ast> for PathCollector<'_> {
    /// A path of one segment is a local name, this module's item or what one of its `use`
    /// items binds (that item is the edge): only longer ones can name another module.
    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.segments.len() > 1 {
            let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
            let line = path.segments.first().map(|s| s.ident.span().start().line).unwrap_or(0);
            self.push(segments, path.leading_colon.is_some(), line);
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        let mut paths = Vec::new();
        flatten_use(&item.tree, &mut Vec::new(), &mut paths);
        for (segments, _) in paths {
            self.push(segments, item.leading_colon.is_some(), item.use_token.span.start().line);
        }
    }

    /// `pub(super)`, `pub(in crate::x)`: who may see an item, not what it uses.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    /// An attribute's arguments, read as tokens: `#[arg(value_parser = doctor::parse_timeout)]`.
    fn visit_meta_list(&mut self, list: &'ast syn::MetaList) {
        self.visit_path(&list.path);
        self.scan(list.tokens.clone());
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        assert!(!mac.path.is_ident("include"), "{}: include! is not followed by the layer check", self.file);
        self.scan(mac.tokens.clone());
    }
}

impl ModuleGraph {
    fn build(sources: Sources) -> Self {
        let mut graph = ModuleGraph::default();
        graph.read_file(Vec::new(), sources);
        graph
    }

    /// A crate from its source folder: `root` (main.rs, lib.rs) and the files its `mod` items name.
    fn of_crate(src: &Path, root: &str) -> Self {
        let shown_from = manifest_dir();
        let sources = |path: &[String]| {
            let base = path.iter().fold(src.to_path_buf(), |dir, s| dir.join(s));
            let candidates = if path.is_empty() { vec![src.join(root)] } else { vec![base.with_extension("rs"), base.join("mod.rs")] };
            let file = candidates.into_iter().find(|f| f.is_file())?;
            let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            Some((text, file.strip_prefix(&shown_from).unwrap_or(&file).display().to_string()))
        };
        let graph = Self::build(&sources);
        // Every source file is a module the check read: none reached another way unseen.
        let mut files = Vec::new();
        rust_files(src, &mut files);
        let on_disk: BTreeSet<String> = files.iter().map(|f| f.strip_prefix(&shown_from).unwrap_or(f).display().to_string()).collect();
        let read: BTreeSet<String> = graph.files.iter().cloned().collect();
        assert_eq!(on_disk, read, "the files of {} and the modules its `mod` items name", src.display());
        graph
    }

    fn read_file(&mut self, path: ModulePath, sources: Sources) {
        let (text, name) = sources(&path).unwrap_or_else(|| panic!("no file for module {}", shown(&path)));
        let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        self.files.push(name.clone());
        self.read_items(&path, &path, &name, &file.items, sources);
    }

    fn read_items(&mut self, path: &ModulePath, file: &ModulePath, name: &str, items: &[syn::Item], sources: Sources) {
        self.modules.entry(path.clone()).or_default().file = file.clone();
        for item in items {
            match item {
                syn::Item::Mod(m) => {
                    assert!(!m.attrs.iter().any(|a| a.path().is_ident("path")), "{name}: #[path] is not followed by the layer check");
                    let child_name = m.ident.to_string();
                    self.modules.get_mut(path).expect("this module").children.insert(child_name.clone());
                    let child = [path.as_slice(), &[child_name]].concat();
                    match &m.content {
                        Some((_, items)) => self.read_items(&child, file, name, items, sources),
                        None => self.read_file(child, sources),
                    }
                }
                syn::Item::Use(u) => {
                    let mut paths = Vec::new();
                    flatten_use(&u.tree, &mut Vec::new(), &mut paths);
                    let line = u.use_token.span.start().line;
                    for (segments, bound) in paths {
                        let written = Written { segments, global: u.leading_colon.is_some() };
                        if let Some(bound) = bound {
                            self.modules.get_mut(path).expect("this module").bindings.insert(bound, written.clone());
                        }
                        self.references.push(Reference { module: path.clone(), path: written, at: format!("{name}:{line}") });
                    }
                }
                other => PathCollector { module: path, file: name, out: &mut self.references }.visit_item(other),
            }
        }
    }

    /// The module a path written in `module` names (an inline one included), and the module
    /// whose `use` item it went through, if any; None for a path outside the crate (`std::`,
    /// another crate's, a local name).
    fn resolve(&self, module: &[String], written: &Written, depth: usize) -> Option<(ModulePath, Option<ModulePath>)> {
        if written.global || depth > 16 {
            return None;
        }
        let (first, rest) = written.segments.split_first()?;
        let here = &self.modules[module];
        let (mut at, rest) = match first.as_str() {
            "crate" => (Vec::new(), rest),
            "self" => (module.to_vec(), rest),
            "super" => {
                let mut at = module.to_vec();
                at.pop();
                let ups = rest.iter().take_while(|s| *s == "super").count();
                at.truncate(at.len().saturating_sub(ups));
                (at, &rest[ups..])
            }
            name if here.children.contains(name) => ([module, &[name.to_string()]].concat(), rest),
            name => {
                // A name this module's own `use` binds: the path it stands for.
                let bound = here.bindings.get(name)?;
                let whole = Written { segments: [bound.segments.as_slice(), rest].concat(), global: bound.global };
                return self.resolve(module, &whole, depth + 1);
            }
        };
        for (i, segment) in rest.iter().enumerate() {
            let m = self.modules.get(&at)?;
            if m.children.contains(segment) {
                at.push(segment.clone());
                continue;
            }
            if let Some(bound) = m.bindings.get(segment) {
                // A name another module's `use` binds (a re-export): where it really comes from.
                let whole = Written { segments: [bound.segments.as_slice(), &rest[i + 1..]].concat(), global: bound.global };
                let (target, _) = self.resolve(&at, &whole, depth + 1)?;
                return Some((target, Some(at)));
            }
            break;
        }
        Some((at, None))
    }

    /// Every edge between two file modules: a path in one that names the other.
    fn edges(&self) -> Vec<Edge> {
        self.references
            .iter()
            .filter_map(|r| {
                let (target, via) = self.resolve(&r.module, &r.path, 0)?;
                let from = self.modules[&r.module].file.clone();
                let to = self.modules[&target].file.clone();
                let via = via.map(|v| self.modules[&v].file.clone());
                (from != to).then(|| Edge { from, to, via, at: r.at.clone(), path: r.path.segments.join("::") })
            })
            .collect()
    }
}

/// The circles among the edges: each set of two or more modules that reach one another, sorted.
fn circles(edges: &[Edge]) -> BTreeSet<Vec<String>> {
    let mut next: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for e in edges {
        next.entry(shown(&e.from)).or_default().insert(shown(&e.to));
    }
    let reach = |start: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![start.clone()];
        while let Some(m) = todo.pop() {
            for n in next.get(&m).into_iter().flatten() {
                if seen.insert(n.clone()) {
                    todo.push(n.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<String, BTreeSet<String>> = next.keys().map(|m| (m.clone(), reach(m))).collect();
    reached
        .iter()
        .map(|(m, from_m)| reached.keys().filter(|n| *n == m || (from_m.contains(*n) && reached[*n].contains(m))).cloned().collect::<Vec<String>>())
        .filter(|circle| circle.len() > 1)
        .collect()
}

/// Each circle with the edges that make it, for a message.
fn explain(found: &BTreeSet<Vec<String>>, edges: &[Edge]) -> String {
    let mut out = String::new();
    for circle in found {
        out.push_str(&format!("  circle {}:\n", circle.join(" <-> ")));
        let mut said = BTreeSet::new();
        for e in edges.iter().filter(|e| circle.contains(&shown(&e.from)) && circle.contains(&shown(&e.to))) {
            if said.insert((shown(&e.from), shown(&e.to))) {
                out.push_str(&format!("    {}\n", e.describe()));
            }
        }
    }
    out
}

fn guard_graph() -> ModuleGraph {
    ModuleGraph::of_crate(&manifest_dir().join("crates/preload/src"), "lib.rs")
}

fn command_graph() -> ModuleGraph {
    ModuleGraph::of_crate(&manifest_dir().join("src"), "main.rs")
}

fn is_policy(m: &[String]) -> bool {
    m.first().is_some_and(|top| POLICY.contains(&top.as_str()))
}

/// The policy modules' edges into `ffi`: those whose path names the edge itself, and those that
/// reach it only through a re-export outside it (lib.rs's).
fn back_edges(graph: &ModuleGraph) -> (Vec<Edge>, Vec<Edge>) {
    let in_ffi = |m: &[String]| m.first().is_some_and(|top| top == "ffi");
    let back = graph.edges().into_iter().filter(|e| is_policy(&e.from) && in_ffi(&e.to));
    let (through, direct) = back.partition(|e| e.via.as_deref().is_some_and(|v| !in_ffi(v)));
    (direct, through)
}

#[test]
fn no_policy_module_imports_from_the_ffi_edge_and_its_edges_through_re_exports_are_the_known_ones() {
    let graph = guard_graph();
    assert!(POLICY.iter().all(|p| graph.modules.contains_key(&vec![p.to_string()])), "the policy modules are the guard's: {POLICY:?}");
    let (direct, through) = back_edges(&graph);
    let direct: Vec<String> = direct.iter().map(Edge::describe).collect();
    assert!(direct.is_empty(), "policy modules that import from the FFI edge:\n{}", direct.join("\n"));
    let found: BTreeSet<(String, String)> = through.iter().map(|e| (shown(&e.from), shown(&e.to))).collect();
    let known: BTreeSet<(String, String)> = KNOWN_BACK_EDGES_THROUGH_REEXPORTS.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    let new: Vec<String> = through.iter().filter(|e| !known.contains(&(shown(&e.from), shown(&e.to)))).map(Edge::describe).collect();
    let gone: Vec<String> = known.difference(&found).map(|(a, b)| format!("{a} -> {b}")).collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "policy modules' edges into the FFI edge through re-exports, against KNOWN_BACK_EDGES_THROUGH_REEXPORTS:\nnew (not listed):\n{}\ngone (take them off the list):\n{}",
        new.join("\n"),
        gone.join("\n")
    );
}

#[test]
fn the_commands_modules_import_in_no_circle() {
    let graph = command_graph();
    assert!(graph.modules.len() > 15, "the command's modules: {:?}", graph.modules.keys().collect::<Vec<_>>());
    let edges = graph.edges();
    let found = circles(&edges);
    assert!(found.is_empty(), "the command's modules import in circles:\n{}", explain(&found, &edges));
}

#[test]
fn the_guards_circles_are_the_known_ones() {
    let edges = guard_graph().edges();
    let found = circles(&edges);
    let known: BTreeSet<Vec<String>> =
        KNOWN_GUARD_CIRCLES.iter().map(|c| c.iter().map(|m| m.to_string()).collect::<BTreeSet<String>>().into_iter().collect()).collect();
    let new: BTreeSet<Vec<String>> = found.difference(&known).cloned().collect();
    let gone: Vec<String> = known.difference(&found).map(|c| c.join(" <-> ")).collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "the guard's circles, against KNOWN_GUARD_CIRCLES:\nnew (not listed):\n{}gone (take them off the list):\n{}",
        explain(&new, &edges),
        gone.join("\n")
    );
}

/// A crate made of the sources given, each by its module path ("" for the root).
fn graph_of(files: &[(&str, &str)]) -> ModuleGraph {
    let files: BTreeMap<String, String> = files.iter().map(|(p, s)| (p.to_string(), s.to_string())).collect();
    ModuleGraph::build(&|path: &[String]| files.get(&path.join("::")).map(|s| (s.clone(), format!("{}.rs", shown(path)))))
}

/// The edges found, as "from -> to" (" via M" where a re-export was followed).
fn edges_of(graph: &ModuleGraph) -> BTreeSet<String> {
    graph
        .edges()
        .iter()
        .map(|e| format!("{} -> {}{}", shown(&e.from), shown(&e.to), e.via.as_ref().map(|v| format!(" via {}", shown(v))).unwrap_or_default()))
        .collect()
}

#[test]
fn the_module_graph_sees_each_form_of_an_import_and_nothing_that_is_not_one() {
    let ffi = ("ffi", "pub mod host; pub mod intercept; pub use intercept::hooks::Hook;");
    let host = ("ffi::host", "pub mod thread; pub fn x() {}");
    let thread = ("ffi::host::thread", "pub fn id() {}");
    let intercept = ("ffi::intercept", "pub mod out_param; pub mod hooks;");
    let out_param = ("ffi::intercept::out_param", "pub fn written() {}");
    let hooks = ("ffi::intercept::hooks", "pub struct Hook;");
    let root = ("", "mod ffi; mod guard; mod trace; pub(crate) use ffi::Hook; pub(crate) use cublasguard_format::state;");
    let trace = ("trace", "pub struct T;");
    let each = |guard: &str| {
        let files = [root, ffi, host, thread, intercept, out_param, hooks, trace, ("guard", guard), ("guard::inner", "pub fn f() {}")];
        let graph = graph_of(&files);
        edges_of(&graph).into_iter().filter(|e| e.starts_with("guard -> ")).collect::<Vec<String>>()
    };
    let import_forms = [
        ("mod inner; use crate::ffi::host::thread;", "guard -> ffi::host::thread"),
        ("mod inner; fn f(p: u8) { crate::ffi::intercept::out_param::written(p) }", "guard -> ffi::intercept::out_param"),
        ("mod inner; use super::ffi::host::x;", "guard -> ffi::host"),
        ("mod inner; use crate::{ffi, trace};", "guard -> ffi"),
        ("mod inner; use crate::ffi::host::{self as h};", "guard -> ffi::host"),
        ("mod inner; use crate::ffi::intercept::*;", "guard -> ffi::intercept"),
        ("mod inner; fn f() { let _ = format!(\"{:?}\", crate::ffi::host::x()); }", "guard -> ffi::host"),
        ("mod inner; macro_rules! m { () => { $crate::ffi::host::x() } }", "guard -> ffi::host"),
        ("mod inner; fn f() -> Vec<crate::ffi::intercept::hooks::Hook> { Vec::new() }", "guard -> ffi::intercept::hooks"),
        ("mod inner; use crate::ffi; fn f() { ffi::host::x() }", "guard -> ffi::host"),
        ("mod inner; mod nested { pub fn f() { super::super::ffi::host::x() } }", "guard -> ffi::host"),
        ("mod inner; use crate::Hook;", "guard -> ffi::intercept::hooks via crate"),
        ("mod inner; fn f() { let _ = crate::Hook; }", "guard -> ffi::intercept::hooks via crate"),
        ("mod inner; use crate::Hook; fn f() { let _ = Hook::X; }", "guard -> ffi::intercept::hooks via crate"),
        ("mod inner; use crate::ffi::Hook;", "guard -> ffi::intercept::hooks via ffi"),
        ("mod inner; #[arg(value_parser = crate::ffi::host::x)] struct S;", "guard -> ffi::host"),
        ("mod inner; fn f() { inner::f() }", "guard -> guard::inner"),
        ("mod inner; fn f() { self::inner::f() }", "guard -> guard::inner"),
    ];
    for (source, edge) in import_forms {
        assert!(each(source).contains(&edge.to_string()), "{source}: {:?}, not {edge}", each(source));
    }
    let not_imports = [
        "mod inner; use std::ffi::{c_int, c_void};",
        "mod inner; // crate::ffi is the edge\n",
        "mod inner; /// crate::ffi::host::x()\nfn f() {}",
        "mod inner; fn f() { let _ = std::ffi::CString::new(\"crate::ffi::host\"); }",
        "mod inner; pub(in crate::ffi) fn f() {}",
        "mod inner; fn f() { ::ffi::host::x() }",
        "mod inner; use crate::state::Allocation;",
        "mod inner; macro_rules! m { ($ffi:ident) => { $ffi::host::x() } }",
        "mod inner; fn f() { let inner = 1; let _ = inner; }",
    ];
    for source in not_imports {
        assert!(each(source).is_empty(), "{source}: {:?}", each(source));
    }
}

#[test]
fn a_back_edge_through_lib_rs_is_told_from_one_that_names_the_edge() {
    let graph = graph_of(&[
        ("", "mod ffi; mod guard; mod session; pub(crate) use ffi::hooks::Hook;"),
        ("ffi", "pub mod hooks; pub mod host; pub use hooks::Hook as EdgeHook;"),
        ("ffi::hooks", "pub struct Hook;"),
        ("ffi::host", "pub fn x() { crate::guard::f() }"),
        ("guard", "use crate::Hook; pub fn f() {}"),
        ("session", "fn a() { crate::ffi::host::x() } fn b() { let _ = crate::ffi::EdgeHook; }"),
    ]);
    let (direct, through) = back_edges(&graph);
    let pairs = |edges: &[Edge]| edges.iter().map(|e| format!("{} -> {}", shown(&e.from), shown(&e.to))).collect::<BTreeSet<String>>();
    assert_eq!(pairs(&through), BTreeSet::from(["guard -> ffi::hooks".to_string()]), "{through:?}");
    assert_eq!(pairs(&direct), BTreeSet::from(["session -> ffi::host".to_string(), "session -> ffi::hooks".to_string()]), "{direct:?}");
    // The edge calling the policy is no back edge.
    assert!(graph.edges().iter().any(|e| shown(&e.from) == "ffi::host" && shown(&e.to) == "guard"));
}

#[test]
fn a_circle_is_modules_that_name_one_another_not_a_parent_that_declares_its_child() {
    let graph = graph_of(&[
        ("", "mod a; mod b; mod c; mod d; fn main() { a::f(); }"),
        ("a", "mod child; pub fn f() { crate::b::g() }"),
        ("a::child", "pub fn h() {}"),
        ("b", "use crate::c::k; pub fn g() {}"),
        ("c", "pub fn k() { super::a::f() } fn l() { crate::d::m() }"),
        ("d", "pub fn m() {}"),
    ]);
    let edges = graph.edges();
    assert_eq!(circles(&edges), BTreeSet::from([vec!["a".to_string(), "b".to_string(), "c".to_string()]]), "{:?}", edges_of(&graph));
    assert!(explain(&circles(&edges), &edges).contains("c -> a: `super::a::f`"), "{}", explain(&circles(&edges), &edges));
    let tree = graph_of(&[("", "mod a; fn main() { a::f(); }"), ("a", "mod child; pub fn f() { child::h() }"), ("a::child", "pub fn h() {}")]);
    assert!(circles(&tree.edges()).is_empty(), "{:?}", edges_of(&tree));
}

#[test]
fn every_policy_module_forbids_unsafe_code_and_every_unsafe_block_of_the_guard_and_the_command_is_linted() {
    let src = manifest_dir().join("crates/preload/src");
    for root in ["guard/mod.rs", "check/mod.rs", "session/mod.rs", "recorder.rs", "redact.rs"] {
        let text = std::fs::read_to_string(src.join(root)).expect("read module root");
        assert!(text.lines().any(|l| l.trim() == "#![forbid(unsafe_code)]"), "{root} does not forbid unsafe code");
    }
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("read lib.rs");
    let command = std::fs::read_to_string(manifest_dir().join("src/main.rs")).expect("read main.rs");
    let nvml = std::fs::read_to_string(manifest_dir().join("crates/nvml/src/lib.rs")).expect("read NVML's client");
    for lint in ["#![deny(unsafe_op_in_unsafe_fn)]", "#![deny(clippy::undocumented_unsafe_blocks)]"] {
        assert!(lib.contains(lint), "lib.rs lacks {lint}");
        assert!(command.lines().any(|l| l.trim() == lint), "the command's main.rs lacks {lint}: its unsafe blocks go unchecked");
        assert!(nvml.lines().any(|l| l.trim() == lint), "crates/nvml's lib.rs lacks {lint}");
    }
    let cuda = std::fs::read_to_string(manifest_dir().join("crates/cuda/src/lib.rs")).expect("read the CUDA list");
    assert!(cuda.lines().any(|l| l.trim() == "#![deny(unsafe_code)]"), "crates/cuda is a list: it has no unsafe code of its own");
}

#[test]
fn the_command_uses_nothing_of_the_preload_library() {
    let mut files = Vec::new();
    rust_files(&manifest_dir().join("src"), &mut files);
    assert!(files.len() > 15, "{files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read source");
        assert!(!text.contains("preload_library") && !text.contains("cublasguard_preload"), "{} uses the preload library", file.display());
    }
}
