// The agent's Markdown, rendered without ever parsing HTML: the text is parsed
// into a small tree of the elements below (parse), and the tree becomes DOM
// nodes through createElement and text nodes only (toDom). Agent text is
// untrusted: a "<script>" or an "<img onerror>" in it stays text, and a link is
// made only for http:, https: and mailto: addresses.
//
// Blocks: paragraphs (a line break inside one is kept), headings (# to ######),
// fenced code (```), lists (- * + and 1.), block quotes (>), rules (---) and
// tables (| a | b | with a |---| line). Inline: `code`, **strong**, *em*,
// _em_, ~~del~~, [links](https://…), and backslash escapes.

export type Tag =
  | "p" | "h3" | "h4" | "h5" | "ul" | "ol" | "li" | "pre" | "code" | "blockquote" | "hr" | "br"
  | "strong" | "em" | "del" | "a" | "table" | "thead" | "tbody" | "tr" | "th" | "td";

/** A text, or an element with children (and, for a link, its checked address). */
export type MdNode = string | { tag: Tag; children: MdNode[]; href?: string };

const SAFE_LINK = /^(https?:\/\/|mailto:)/i;

/** The address a link may point at, or null: only http(s) and mailto, never javascript: or data:. */
export function safeHref(raw: string): string | null {
  const href = raw.trim();
  if (!SAFE_LINK.test(href)) return null;
  try {
    const url = new URL(href);
    return url.protocol === "http:" || url.protocol === "https:" || url.protocol === "mailto:" ? url.href : null;
  } catch {
    return null;
  }
}

const el = (tag: Tag, children: MdNode[] = [], href?: string): MdNode => (href === undefined ? { tag, children } : { tag, children, href });

// ---- inline ----

/** Inline Markdown of one block's text. */
export function parseInline(text: string): MdNode[] {
  const out: MdNode[] = [];
  let plain = "";
  const flush = () => {
    if (plain) out.push(plain);
    plain = "";
  };
  let i = 0;
  while (i < text.length) {
    const c = text[i]!;
    const rest = text.slice(i);
    if (c === "\\" && i + 1 < text.length && /[\\`*_~[\]()#>+\-.!|]/.test(text[i + 1]!)) {
      plain += text[i + 1];
      i += 2;
      continue;
    }
    if (c === "\n") {
      flush();
      out.push(el("br"));
      i++;
      continue;
    }
    if (c === "`") {
      const ticks = /^`+/.exec(rest)![0];
      const end = text.indexOf(ticks, i + ticks.length);
      if (end > 0) {
        flush();
        out.push(el("code", [text.slice(i + ticks.length, end).replace(/^ (.*) $/s, "$1")]));
        i = end + ticks.length;
        continue;
      }
    }
    if (c === "[") {
      const m = /^\[([^\]\n]*)\]\(([^)\s]*)\)/.exec(rest);
      if (m) {
        flush();
        const href = safeHref(m[2]!);
        const label = parseInline(m[1]!);
        out.push(...(href ? [el("a", label, href)] : label));
        i += m[0].length;
        continue;
      }
    }
    const delimited = (delim: string, tag: Tag): boolean => {
      if (!rest.startsWith(delim)) return false;
      const inner = rest.slice(delim.length);
      if (inner === "" || /^\s/.test(inner)) return false;
      const end = inner.indexOf(delim);
      if (end <= 0 || /\s$/.test(inner.slice(0, end))) return false;
      // Underscores inside words (snake_case) are no emphasis.
      if (delim[0] === "_" && (/\w$/.test(text.slice(0, i)) || /^\w/.test(inner.slice(end + delim.length)))) return false;
      flush();
      out.push(el(tag, parseInline(inner.slice(0, end))));
      i += delim.length * 2 + end;
      return true;
    };
    if (delimited("**", "strong") || delimited("__", "strong") || delimited("~~", "del") || delimited("*", "em") || delimited("_", "em")) continue;
    plain += c;
    i++;
  }
  flush();
  return out;
}

// ---- blocks ----

const FENCE = /^\s{0,3}(```+|~~~+)/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;
const BULLET = /^\s*[-*+]\s+(.*)$/;
const NUMBERED = /^\s*\d{1,9}[.)]\s+(.*)$/;
const QUOTE = /^\s{0,3}>\s?(.*)$/;
const TABLE_RULE = /^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$/;

function cells(row: string): string[] {
  return row.trim().replace(/^\|/, "").replace(/\|$/, "").split(/(?<!\\)\|/).map((c) => c.trim());
}

/** The Markdown text as a list of block nodes. */
export function parse(markdown: string): MdNode[] {
  const lines = markdown.replace(/\r\n?/g, "\n").split("\n");
  const blocks: MdNode[] = [];
  let i = 0;
  const startsBlock = (line: string, next: string | undefined) =>
    FENCE.test(line) || HEADING.test(line) || RULE.test(line) || BULLET.test(line) || NUMBERED.test(line) || QUOTE.test(line) || (line.includes("|") && next !== undefined && TABLE_RULE.test(next));
  while (i < lines.length) {
    const line = lines[i]!;
    if (line.trim() === "") {
      i++;
      continue;
    }
    const fence = FENCE.exec(line);
    if (fence) {
      const body: string[] = [];
      i++;
      while (i < lines.length && !lines[i]!.trimStart().startsWith(fence[1]!)) body.push(lines[i++]!);
      i++; // the closing fence (or the end)
      blocks.push(el("pre", [el("code", [body.join("\n")])]));
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading) {
      const level = heading[1]!.length;
      blocks.push(el(level === 1 ? "h3" : level === 2 ? "h4" : "h5", parseInline(heading[2]!)));
      i++;
      continue;
    }
    if (RULE.test(line)) {
      blocks.push(el("hr"));
      i++;
      continue;
    }
    if (line.includes("|") && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1]!)) {
      const head = el("thead", [el("tr", cells(line).map((c) => el("th", parseInline(c))))]);
      const rows: MdNode[] = [];
      i += 2;
      while (i < lines.length && lines[i]!.includes("|") && lines[i]!.trim() !== "") rows.push(el("tr", cells(lines[i++]!).map((c) => el("td", parseInline(c)))));
      blocks.push(el("table", [head, el("tbody", rows)]));
      continue;
    }
    if (BULLET.test(line) || NUMBERED.test(line)) {
      const ordered = !BULLET.test(line);
      const item = ordered ? NUMBERED : BULLET;
      const items: string[] = [];
      while (i < lines.length && lines[i]!.trim() !== "") {
        const m = item.exec(lines[i]!);
        if (m) items.push(m[1]!);
        else if (/^\s+\S/.test(lines[i]!) && items.length) items[items.length - 1] += `\n${lines[i]!.trim()}`; // a continuation line
        else break;
        i++;
      }
      blocks.push(el(ordered ? "ol" : "ul", items.map((t) => el("li", parseInline(t)))));
      continue;
    }
    if (QUOTE.test(line)) {
      const quoted: string[] = [];
      while (i < lines.length && QUOTE.test(lines[i]!)) quoted.push(QUOTE.exec(lines[i++]!)![1]!);
      blocks.push(el("blockquote", parse(quoted.join("\n"))));
      continue;
    }
    const para: string[] = [line.trim()];
    i++;
    while (i < lines.length && lines[i]!.trim() !== "" && !startsBlock(lines[i]!, lines[i + 1])) para.push(lines[i++]!.trim());
    blocks.push(el("p", parseInline(para.join("\n"))));
  }
  return blocks;
}

// ---- DOM ----

/** DOM nodes for `nodes`: elements and text nodes only, links opened in a new tab without the opener. */
export function toDom(nodes: MdNode[], doc: Document): Node[] {
  return nodes.map((n) => {
    if (typeof n === "string") return doc.createTextNode(n);
    const e = doc.createElement(n.tag);
    if (n.tag === "a") {
      const href = n.href === undefined ? null : safeHref(n.href);
      if (href) {
        e.setAttribute("href", href);
        e.setAttribute("target", "_blank");
        e.setAttribute("rel", "noopener noreferrer");
      }
    }
    e.append(...toDom(n.children, doc));
    return e;
  });
}

/** Replaces `target`'s content with the rendered Markdown. */
export function renderMarkdown(target: HTMLElement, markdown: string): void {
  target.replaceChildren(...toDom(parse(markdown), target.ownerDocument));
}
