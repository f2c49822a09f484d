// Markdown to safe DOM. Model output is untrusted: raw HTML in it is shown as text (never parsed), and the
// rendered HTML still passes DOMPurify, so no script, handler or javascript: URL from a model can ever run.

import { Marked } from "../vendor/marked/marked.esm.js";
import DOMPurify from "../vendor/dompurify/purify.es.mjs";

const escapeHtml = (text) =>
  text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

const marked = new Marked({
  gfm: true,
  breaks: true,
  async: false,
  renderer: {
    // Raw HTML blocks and inline tags are displayed literally.
    html(token) {
      return escapeHtml(token.text ?? token.raw ?? "");
    },
    // Remote images in model output would load from anywhere (tracking the reader): link them instead.
    image(token) {
      return `<a href="${escapeHtml(token.href || "")}">${escapeHtml(token.text || token.href || "image")}</a>`;
    },
  },
});

const PURIFY = {
  USE_PROFILES: { html: true },
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "object", "embed", "svg", "math", "img"],
  FORBID_ATTR: ["style", "id"],
  ALLOW_DATA_ATTR: false,
};

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
  }
});

// Only marked's own `language-xyz` class on code survives, so model output cannot borrow the page's styles.
DOMPurify.addHook("uponSanitizeAttribute", (node, data) => {
  if (data.attrName === "class" && !(node.tagName === "CODE" && /^language-[\w+-]+$/.test(data.attrValue))) {
    data.keepAttr = false;
  }
});

/** Sanitized HTML for a markdown string. */
export function markdownToHtml(text) {
  const html = marked.parse(text || "");
  return DOMPurify.sanitize(html, PURIFY);
}

/** Renders `text` into `container`, adding a copy button to each code block. */
export function renderMarkdown(container, text) {
  container.innerHTML = markdownToHtml(text);
  for (const pre of container.querySelectorAll("pre")) {
    const wrap = document.createElement("div");
    wrap.className = "code-block";
    const bar = document.createElement("div");
    bar.className = "code-bar";
    const lang = pre.querySelector("code")?.className.match(/language-([\w+-]+)/);
    const label = document.createElement("span");
    label.textContent = lang ? lang[1] : "code";
    const button = document.createElement("button");
    button.type = "button";
    button.className = "copy-code";
    button.textContent = "Copy";
    button.setAttribute("aria-label", "Copy code");
    bar.append(label, button);
    pre.replaceWith(wrap);
    wrap.append(bar, pre);
  }
}

/** Copies text to the clipboard, falling back to a hidden textarea where the Clipboard API is unavailable. */
export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch {
      // fall through to the legacy path
    }
  }
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.style.position = "fixed";
  area.style.opacity = "0";
  document.body.append(area);
  area.select();
  const ok = document.execCommand("copy");
  area.remove();
  return ok;
}
