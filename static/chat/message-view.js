// One message bubble. An assistant bubble follows its generation: deltas are appended to its text and only
// this bubble's markdown is re-rendered, at most once per animation frame, however fast tokens arrive.

import { copyText, renderMarkdown } from "./markdown.js";

const ACTIVE = new Set(["queued", "running"]);

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function formatStats(stats) {
  if (!stats) return "";
  const parts = [];
  if (typeof stats.ttft_ms === "number") {
    parts.push(stats.ttft_ms >= 1000 ? `TTFT ${(stats.ttft_ms / 1000).toFixed(2)} s` : `TTFT ${Math.round(stats.ttft_ms)} ms`);
  }
  if (typeof stats.tokens_per_s === "number") parts.push(`${stats.tokens_per_s.toFixed(1)} tokens/s`);
  if (typeof stats.completion_tokens === "number") parts.push(`${stats.completion_tokens} tokens`);
  if (stats.cached_prompt_tokens) parts.push(`${stats.cached_prompt_tokens} prompt tokens cached`);
  return parts.join(" · ");
}

export class MessageView {
  /**
   * @param {{role: string, messageId?: number|null, content?: string, generation?: object|null,
   *          onRegenerate?: () => void}} init
   */
  constructor({ role, messageId = null, content = "", generation = null, onRegenerate = () => {} }) {
    this.role = role;
    this.messageId = messageId;
    this.onRegenerate = onRegenerate;
    this.generationId = null;
    this.state = "done";
    this.text = content;
    this.seq = 0;
    this.position = null;
    this.stats = null;
    this.error = "";
    this.frame = 0;
    this.isLast = false;

    this.el = el("article", `msg msg-${role}`);
    this.el.append(el("h3", "visually-hidden", role === "user" ? "You said:" : "Assistant said:"));
    this.body = el("div", role === "user" ? "msg-body msg-plain" : "msg-body markdown");
    this.el.append(this.body);
    if (role === "assistant") {
      this.status = el("div", "msg-status");
      this.status.setAttribute("role", "status");
      this.meta = el("div", "msg-meta");
      this.el.append(this.status, this.meta);
      this.el.addEventListener("click", (event) => this.onClick(event));
    }
    if (generation) this.setGeneration(generation);
    else this.renderNow();
  }

  get isActive() {
    return ACTIVE.has(this.state);
  }

  /** Replaces everything with a server generation object (history, snapshot, done). */
  setGeneration(gen) {
    this.generationId = gen.id;
    this.el.dataset.generationId = gen.id;
    if (gen.message_id != null) this.messageId = gen.message_id;
    if (typeof gen.seq === "number" && gen.seq >= this.seq) {
      this.text = gen.text ?? "";
      this.seq = gen.seq;
    } else if (!ACTIVE.has(gen.state) && typeof gen.text === "string") {
      this.text = gen.text; // a finished answer's text is final
    }
    this.state = gen.state;
    this.position = gen.position ?? null;
    this.stats = gen.stats ?? null;
    this.error = gen.error ?? "";
    this.renderNow();
  }

  /** Applies one delta; returns "ok", "stale" (already have it) or "gap" (a delta went missing). */
  applyDelta(seq, text) {
    if (seq <= this.seq) return "stale";
    if (seq !== this.seq + 1) return "gap";
    const first = this.text === "";
    this.seq = seq;
    this.text += text;
    if (this.state === "queued") this.state = "running";
    if (first) this.renderChrome(); // drop the typing dots once text shows
    this.scheduleRender();
    return "ok";
  }

  setQueued(position) {
    this.state = "queued";
    this.position = position;
    this.renderChrome();
  }

  setStarted() {
    if (this.state === "queued") {
      this.state = "running";
      this.position = null;
      this.renderChrome();
    }
  }

  setLast(isLast) {
    if (this.isLast === isLast) return;
    this.isLast = isLast;
    if (this.role === "assistant") this.renderChrome();
  }

  scheduleRender() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.renderBody();
    });
  }

  renderNow() {
    if (this.frame) cancelAnimationFrame(this.frame);
    this.frame = 0;
    this.renderBody();
    if (this.role === "assistant") this.renderChrome();
  }

  renderBody() {
    if (this.role === "user") {
      this.body.textContent = this.text;
      return;
    }
    renderMarkdown(this.body, this.text);
  }

  /** The status line and footer: queue position, typing, stopped, error with retry, stats, actions. */
  renderChrome() {
    this.el.classList.toggle("is-streaming", this.state === "running");
    this.el.classList.toggle("is-queued", this.state === "queued");
    this.el.setAttribute("aria-busy", String(this.isActive));
    this.el.dataset.state = this.state;
    this.status.replaceChildren();
    if (this.state === "queued") {
      const pos = this.position ? ` (position ${this.position})` : "";
      this.status.append(el("span", "spinner"), el("span", "", `Waiting for a slot${pos}`));
    } else if (this.state === "running" && !this.text) {
      this.status.append(el("span", "typing"), el("span", "visually-hidden", "Generating"));
    } else if (this.state === "failed") {
      const box = el("div", "msg-error");
      box.setAttribute("role", "alert");
      box.append(el("span", "", this.error ? `The answer failed: ${this.error}` : "The answer failed."));
      const retry = el("button", "btn btn-small", "Retry");
      retry.type = "button";
      retry.dataset.action = "regenerate";
      box.append(retry);
      this.status.append(box);
    }
    this.meta.replaceChildren();
    if (this.isActive) return;
    if (this.state === "stopped") this.meta.append(el("span", "badge badge-muted", "Stopped"));
    const stats = formatStats(this.stats);
    if (stats) this.meta.append(el("span", "stats", stats));
    const actions = el("span", "msg-actions");
    const copy = el("button", "link-btn", "Copy");
    copy.type = "button";
    copy.dataset.action = "copy";
    actions.append(copy);
    if (this.isLast && this.state !== "failed") {
      const regen = el("button", "link-btn", "Regenerate");
      regen.type = "button";
      regen.dataset.action = "regenerate";
      actions.append(regen);
    }
    this.meta.append(actions);
  }

  async onClick(event) {
    const button = event.target.closest("button");
    if (!button || !this.el.contains(button)) return;
    if (button.classList.contains("copy-code")) {
      const code = (button.closest(".code-block")?.querySelector("pre")?.textContent ?? "").replace(/\n$/, "");
      flash(button, (await copyText(code)) ? "Copied" : "Copy failed");
    } else if (button.dataset.action === "copy") {
      flash(button, (await copyText(this.text)) ? "Copied" : "Copy failed");
    } else if (button.dataset.action === "regenerate") {
      this.onRegenerate();
    }
  }
}

function flash(button, label) {
  const original = button.textContent;
  button.textContent = label;
  setTimeout(() => {
    button.textContent = original;
  }, 1200);
}
