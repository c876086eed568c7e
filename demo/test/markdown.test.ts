import { describe, expect, it } from "vitest";
import { parse, parseInline, safeHref, toDom, type MdNode } from "../src/markdown.js";

describe("the demo's Markdown", () => {
  it("paragraphs, headings, rules, line breaks", () => {
    expect(parse("# Title\n\nOne line\nnext line\n\n---\n### Small")).toEqual([
      { tag: "h3", children: ["Title"] },
      { tag: "p", children: ["One line", { tag: "br", children: [] }, "next line"] },
      { tag: "hr", children: [] },
      { tag: "h5", children: ["Small"] },
    ]);
  });

  it("inline code, strong, emphasis, strike-through, escapes; snake_case stays text", () => {
    expect(parseInline("Run `npm test` **now**, *please* or _later_; ~~never~~ \\*literally\\* my_var_name")).toEqual([
      "Run ",
      { tag: "code", children: ["npm test"] },
      " ",
      { tag: "strong", children: ["now"] },
      ", ",
      { tag: "em", children: ["please"] },
      " or ",
      { tag: "em", children: ["later"] },
      "; ",
      { tag: "del", children: ["never"] },
      " *literally* my_var_name",
    ]);
    // Markdown inside a code span is text.
    expect(parseInline("`**not bold**`")).toEqual([{ tag: "code", children: ["**not bold**"] }]);
    expect(parseInline("2 * 3 * 4")).toEqual(["2 * 3 * 4"]);
  });

  it("fenced code keeps its text as it is", () => {
    expect(parse("```ts\nconst a = 1 < 2 && \"<b>\";\n\n# not a heading\n```\nafter")).toEqual([
      { tag: "pre", children: [{ tag: "code", children: ['const a = 1 < 2 && "<b>";\n\n# not a heading'] }] },
      { tag: "p", children: ["after"] },
    ]);
  });

  it("lists, quotes and tables", () => {
    expect(parse("- one\n- **two**\n  more\n\n1. first\n2) second\n\n> quoted\n> text")).toEqual([
      { tag: "ul", children: [{ tag: "li", children: ["one"] }, { tag: "li", children: [{ tag: "strong", children: ["two"] }, { tag: "br", children: [] }, "more"] }] },
      { tag: "ol", children: [{ tag: "li", children: ["first"] }, { tag: "li", children: ["second"] }] },
      { tag: "blockquote", children: [{ tag: "p", children: ["quoted", { tag: "br", children: [] }, "text"] }] },
    ]);
    expect(parse("| tool | calls |\n|---|:---:|\n| `update_counter` | 2 |")).toEqual([
      {
        tag: "table",
        children: [
          { tag: "thead", children: [{ tag: "tr", children: [{ tag: "th", children: ["tool"] }, { tag: "th", children: ["calls"] }] }] },
          { tag: "tbody", children: [{ tag: "tr", children: [{ tag: "td", children: [{ tag: "code", children: ["update_counter"] }] }, { tag: "td", children: ["2"] }] }] },
        ],
      },
    ]);
  });

  it("links only to http, https and mailto; anything else is its text", () => {
    expect(parseInline("[docs](https://example.com/a?b=1) [mail](mailto:a@example.com)")).toEqual([
      { tag: "a", children: ["docs"], href: "https://example.com/a?b=1" },
      " ",
      { tag: "a", children: ["mail"], href: "mailto:a@example.com" },
    ]);
    for (const bad of ["javascript:alert(1)", "JaVaScRiPt:alert(1)", "data:text/html,<script>alert(1)</script>", "vbscript:x", "/relative", "//evil.example", " javascript:alert(1)"]) {
      expect(safeHref(bad), bad).toBeNull();
    }
    // The unsafe link is dropped: its label stays, as text.
    expect(parseInline("[click](javascript:alert(1))")).toEqual(["click", ")"]);
    expect(parseInline("[x](data:text/html,hi)")).toEqual(["x"]);
  });

  it("HTML in the text stays text", () => {
    const nodes = parse('<img src=x onerror="window.pwned=1"> <script>alert(1)</script>\n\n<b>bold?</b>');
    expect(nodes).toEqual([
      { tag: "p", children: ['<img src=x onerror="window.pwned=1"> <script>alert(1)</script>'] },
      { tag: "p", children: ["<b>bold?</b>"] },
    ]);
  });
});

describe("toDom", () => {
  /** A document that records what is made: elements, attributes, text nodes; it has no innerHTML. */
  class FakeElement {
    attributes: Record<string, string> = {};
    children: Array<FakeElement | { text: string }> = [];
    constructor(readonly tag: string) {}
    setAttribute(k: string, v: string) {
      this.attributes[k] = v;
    }
    append(...nodes: Array<FakeElement | { text: string }>) {
      this.children.push(...nodes);
    }
  }
  const doc = { createElement: (tag: string) => new FakeElement(tag), createTextNode: (text: string) => ({ text }) } as unknown as Document;

  it("makes elements and text nodes only; links open in a new tab without the opener", () => {
    const [p] = toDom(parse("A [link](https://example.com) and <i>text</i>"), doc) as unknown as FakeElement[];
    expect(p!.tag).toBe("p");
    const link = p!.children[1] as FakeElement;
    expect(link.tag).toBe("a");
    expect(link.attributes).toEqual({ href: "https://example.com/", target: "_blank", rel: "noopener noreferrer" });
    expect(p!.children[2]).toEqual({ text: " and <i>text</i>" });
  });

  it("a link node with an unsafe address (made by hand) gets no href", () => {
    const nodes: MdNode[] = [{ tag: "a", children: ["x"], href: "javascript:alert(1)" }];
    const [a] = toDom(nodes, doc) as unknown as FakeElement[];
    expect(a!.attributes).toEqual({});
  });
});
