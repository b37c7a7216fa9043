//! Every `unsafe fn` and `unsafe trait` in the repository states its contract in a `# Safety`
//! section of its doc comment.
//!
//! Clippy's `missing_safety_doc` (on in the workspace lints) asks this only of exported items;
//! most of Tessera's unsafe functions are crate-private kernels, so this test asks it of all of
//! them: it parses every `.rs` file under `src/`, `tests/` and each crate's `src/`, `tests/`,
//! `examples/` and `benches/` (with `syn`, so attributes such as `#[target_feature]` or
//! `#[inline]` between the doc comment and the `fn`, nested functions and multi-line signatures
//! are all seen as the compiler sees them) and fails naming `file:line` of each one whose doc
//! comment has no line `# Safety`.
//!
//! Methods of `impl Trait for Type` blocks are not asked: their contract is the trait method's
//! (an implementation may not require more of its callers than the trait states), and the
//! trait's declaration is asked like any other function. Functions nested inside such a method
//! are asked.
//!
//! The other half of the rule, a `// SAFETY:` comment on every `unsafe` block, is clippy's
//! `undocumented_unsafe_blocks` (workspace lints).

use std::fs;
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// Whether the doc attributes among `attrs` have a line that reads `# Safety`.
fn has_safety_section(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some(s.value()),
                _ => None,
            },
            _ => None,
        })
        .any(|doc| doc.lines().any(|l| l.trim() == "# Safety"))
}

/// Collects the unsafe items without a `# Safety` section, as `line: what name`.
#[derive(Default)]
struct Finder {
    /// Inside the items of an `impl Trait for Type` block (not inside their bodies).
    in_trait_impl: bool,
    missing: Vec<String>,
    /// Unsafe functions and traits seen that must carry a section (documented or not).
    asked: usize,
}

impl Finder {
    fn ask(&mut self, attrs: &[syn::Attribute], what: &str, ident: &syn::Ident) {
        self.asked += 1;
        if !has_safety_section(attrs) {
            let line = ident.span().start().line;
            self.missing.push(format!("{line}: {what} {ident}"));
        }
    }

    /// Visits a function body with the trait-impl exemption lifted (nested items are asked).
    fn body(&mut self, block: &syn::Block) {
        let outer = std::mem::replace(&mut self.in_trait_impl, false);
        self.visit_block(block);
        self.in_trait_impl = outer;
    }
}

impl<'ast> Visit<'ast> for Finder {
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if f.sig.unsafety.is_some() {
            self.ask(&f.attrs, "unsafe fn", &f.sig.ident);
        }
        self.body(&f.block);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if f.sig.unsafety.is_some() && !self.in_trait_impl {
            self.ask(&f.attrs, "unsafe fn", &f.sig.ident);
        }
        self.body(&f.block);
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if f.sig.unsafety.is_some() {
            self.ask(&f.attrs, "unsafe fn", &f.sig.ident);
        }
        if let Some(block) = &f.default {
            self.body(block);
        }
    }

    fn visit_item_trait(&mut self, t: &'ast syn::ItemTrait) {
        if t.unsafety.is_some() {
            self.ask(&t.attrs, "unsafe trait", &t.ident);
        }
        syn::visit::visit_item_trait(self, t);
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        let outer = std::mem::replace(&mut self.in_trait_impl, i.trait_.is_some());
        syn::visit::visit_item_impl(self, i);
        self.in_trait_impl = outer;
    }
}

/// The unsafe items of `src` without a `# Safety` section, and how many unsafe items it has.
fn missing_in(src: &str) -> Result<(Vec<String>, usize), syn::Error> {
    let file = syn::parse_file(src)?;
    let mut finder = Finder::default();
    finder.visit_file(&file);
    Ok((finder.missing, finder.asked))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_unsafe_fn_and_trait_has_a_safety_section() {
    let root = tessera_test_support::repo_root();
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    rust_files(&root.join("tests"), &mut files);
    let crates = fs::read_dir(root.join("crates")).expect("the crates directory");
    for krate in crates {
        let krate = krate.expect("a directory entry").path();
        for sub in ["src", "tests", "examples", "benches"] {
            rust_files(&krate.join(sub), &mut files);
        }
    }
    files.sort();
    assert!(
        files
            .iter()
            .any(|f| f.ends_with("crates/kernels/src/kernel/x86/mod.rs")),
        "the walk missed the kernels' sources: {} files from {}",
        files.len(),
        root.display()
    );
    let (mut missing, mut asked) = (Vec::new(), 0);
    for path in &files {
        let src =
            fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let (m, n) = missing_in(&src).unwrap_or_else(|e| {
            let at = e.span().start();
            panic!("{}:{}:{}: {e}", path.display(), at.line, at.column + 1)
        });
        let rel = path
            .strip_prefix(&root)
            .unwrap_or(path)
            .display()
            .to_string();
        missing.extend(m.into_iter().map(|m| format!("{rel}:{m}")));
        asked += n;
    }
    // Far fewer would mean the walk or the parse lost the kernels (about two hundred).
    assert!(asked > 100, "only {asked} unsafe items found");
    assert!(
        missing.is_empty(),
        "{} of {asked} unsafe items have no `# Safety` section in their doc comment (state what \
         the caller must guarantee):\n{}",
        missing.len(),
        missing.join("\n")
    );
}

#[test]
fn the_check_sees_attributes_nesting_and_trait_impls() {
    let src = r#"
        /// Documented.
        ///
        /// # Safety
        /// AVX2 must be available.
        #[inline(always)]
        #[target_feature(enable = "avx2")]
        pub(crate) unsafe fn good() {}

        /// No section.
        #[target_feature(enable = "avx2")]
        unsafe fn no_section() {}

        fn outer() {
            unsafe fn nested() {}
        }

        /// # Safety
        /// Implementors hold it.
        unsafe trait Marked {}
        unsafe trait Unmarked {}

        trait T {
            /// # Safety
            /// Stated once here.
            unsafe fn declared();
            unsafe fn undeclared();
        }

        impl T for () {
            unsafe fn declared() {
                unsafe fn inside_impl() {}
            }
            unsafe fn undeclared() {}
        }

        struct S;
        impl S {
            /// Says "Safety" but has no section.
            unsafe fn inherent(&self) {}
        }
    "#;
    let (missing, asked) = missing_in(src).expect("the sample parses");
    let names: Vec<&str> = missing
        .iter()
        .map(|m| m.rsplit(' ').next().unwrap_or(""))
        .collect();
    assert_eq!(
        names,
        [
            "no_section",
            "nested",
            "Unmarked",
            "undeclared",
            "inside_impl",
            "inherent"
        ]
    );
    assert_eq!(asked, 9);
    // Lines are the names' lines in the sample.
    assert!(
        missing[0].starts_with("12: unsafe fn no_section"),
        "{missing:?}"
    );
}
