//! Markdown read the way GitHub renders it, for the documentation tests (`tests/docs_drift.rs`):
//! a file's inline code spans, its link targets (with their lines) and the anchors its headings
//! get. Parsing is pulldown-cmark's (CommonMark plus GitHub's tables), so links inside code blocks
//! or code spans are not links and reference-style links are resolved; the heading anchors follow
//! GitHub's slug rules. Included with `#[path = "support/markdown.rs"]`.

use std::collections::BTreeSet;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// One link (or image) of a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// The destination as written (`../docs/x.md#y`, `https://...`, `#z`).
    pub dest: String,
    /// The line it is on, from 1.
    pub line: usize,
}

/// What the documentation tests need from one Markdown file.
#[derive(Debug, Default)]
pub struct Doc {
    /// The text of every inline code span, in order.
    pub code_spans: Vec<String>,
    /// Every link and image destination.
    pub links: Vec<Link>,
    /// The anchors a link's `#fragment` can name: each heading's slug (duplicates numbered as
    /// GitHub does) and the `id`/`name` of HTML elements written in the file.
    pub anchors: BTreeSet<String>,
}

fn options() -> Options {
    Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
}

/// Reads one Markdown document.
pub fn parse(text: &str) -> Doc {
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    let mut doc = Doc::default();
    let mut slugs = Slugger::default();
    // The text of the heading being read, if any.
    let mut heading: Option<String> = None;
    for (event, range) in Parser::new_ext(text, options()).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::End(TagEnd::Heading(_)) => {
                if let Some(h) = heading.take() {
                    doc.anchors.insert(slugs.slug(&h));
                }
            }
            Event::Text(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::Code(c) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&c);
                }
                doc.code_spans.push(c.to_string());
            }
            Event::Start(Tag::Link { dest_url, .. }) | Event::Start(Tag::Image { dest_url, .. }) => {
                doc.links.push(Link {
                    dest: dest_url.to_string(),
                    line: line_of(range.start),
                });
            }
            Event::Html(html) | Event::InlineHtml(html) => {
                doc.anchors.extend(html_ids(&html));
            }
            _ => {}
        }
    }
    doc
}

/// GitHub's heading anchors (github-slugger): lower case; every character that is not a letter,
/// a digit, a space, `-` or `_` dropped; spaces turned into `-`; a slug already used gets `-1`,
/// `-2`, ... (the first free one).
#[derive(Default)]
pub struct Slugger {
    used: BTreeSet<String>,
}

impl Slugger {
    pub fn slug(&mut self, heading: &str) -> String {
        let base: String = heading
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut slug = base.clone();
        let mut n = 0;
        while self.used.contains(&slug) {
            n += 1;
            slug = format!("{base}-{n}");
        }
        self.used.insert(slug.clone());
        slug
    }
}

/// The values of `id="..."` and `name="..."` attributes in a piece of HTML (`<a id="x"></a>`).
fn html_ids(html: &str) -> Vec<String> {
    let mut out = Vec::new();
    for attr in ["id=", "name="] {
        let mut rest = html;
        while let Some(at) = rest.find(attr) {
            let before = rest[..at].chars().last();
            rest = &rest[at + attr.len()..];
            if before.is_some_and(|c| !c.is_whitespace()) {
                continue;
            }
            let Some(quote) = rest.chars().next().filter(|c| *c == '"' || *c == '\'') else {
                continue;
            };
            if let Some(end) = rest[1..].find(quote) {
                out.push(rest[1..1 + end].to_string());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_follow_github() {
        let mut s = Slugger::default();
        assert_eq!(s.slug("Logs and their rotation"), "logs-and-their-rotation");
        assert_eq!(s.slug("`get ovsflows --policy`"), "get-ovsflows---policy");
        assert_eq!(s.slug("What's refused, and why?"), "whats-refused-and-why");
        assert_eq!(s.slug("snake_case & C++"), "snake_case--c");
        assert_eq!(s.slug("Logs and their rotation"), "logs-and-their-rotation-1");
        assert_eq!(s.slug("Logs and their rotation"), "logs-and-their-rotation-2");
        assert_eq!(s.slug("Überblick"), "überblick");
    }

    #[test]
    fn links_spans_and_anchors_are_read() {
        let doc = parse(
            "# Top `x`\n\nSee [a](a.md#b) and `code [no](link.md)`.\n\n\
             ```\n[not](a link)\n```\n\n[ref]: other.md\n\nUse [it][ref]. <a id=\"here\"></a>\n\n\
             ## Top x\n",
        );
        let dests: Vec<(&str, usize)> = doc.links.iter().map(|l| (l.dest.as_str(), l.line)).collect();
        assert_eq!(dests, [("a.md#b", 3), ("other.md", 11)]);
        assert_eq!(doc.code_spans, ["x", "code [no](link.md)"]);
        assert_eq!(
            doc.anchors.iter().map(String::as_str).collect::<Vec<_>>(),
            ["here", "top-x", "top-x-1"]
        );
    }
}
