// The open conversation's messages: keeps one MessageView per message, finds answers by generation id,
// and keeps the view pinned to the bottom while the reader is there.

import { MessageView } from "./message-view.js";

const PIN_SLACK_PX = 48;

export class ThreadView {
  /**
   * @param {{scroller: HTMLElement, list: HTMLElement, welcome: HTMLElement, onRegenerate: () => void}} parts
   */
  constructor({ scroller, list, welcome, onRegenerate }) {
    this.scroller = scroller;
    this.list = list;
    this.welcome = welcome;
    this.onRegenerate = onRegenerate;
    this.views = [];
    this.pinned = true;
    scroller.addEventListener("scroll", () => {
      const gap = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight;
      this.pinned = gap < PIN_SLACK_PX;
    });
    new ResizeObserver(() => {
      if (this.pinned) this.scrollToEnd();
    }).observe(list);
  }

  scrollToEnd() {
    this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  clear() {
    this.views = [];
    this.list.replaceChildren();
    this.pinned = true;
    this.refresh();
  }

  /** Shows a `history` reply: the whole conversation as the server has it now. */
  load(messages) {
    this.clear();
    for (const message of messages) this.append(this.viewFor(message));
    this.refresh();
    this.scrollToEnd();
  }

  viewFor(message) {
    return new MessageView({
      role: message.role,
      messageId: message.id,
      content: message.content,
      generation: message.generation,
      onRegenerate: this.onRegenerate,
    });
  }

  append(view) {
    this.views.push(view);
    this.list.append(view.el);
  }

  /** A `message` event: a user message from this or another tab, or an answer's message. */
  addMessage(message) {
    if (this.views.some((v) => v.messageId === message.id && v.role === message.role)) return;
    if (message.role === "assistant" && message.generation) {
      const existing = this.byGeneration(message.generation.id);
      if (existing) {
        existing.messageId = message.id;
        return;
      }
    }
    this.append(this.viewFor(message));
    this.pinned = true;
    this.refresh();
  }

  /**
   * A `generation`, `snapshot` or `done` event: updates its answer, or (`create`, for `generation`) adds one.
   * A regenerated answer takes the place of the one it replaces (`replacesMessageId`, else the last answer
   * when no user message follows it).
   */
  upsertGeneration(gen, { create = false, replacesMessageId = null } = {}) {
    let view = this.byGeneration(gen.id);
    if (!view && gen.message_id != null) {
      view = this.views.find((v) => v.role === "assistant" && v.messageId === gen.message_id);
    }
    if (!view && !create) return null; // a snapshot or end of an answer this view never showed
    if (!view) {
      const last = this.views.at(-1);
      const replaced =
        replacesMessageId != null
          ? this.views.find((v) => v.role === "assistant" && v.messageId === replacesMessageId)
          : last && last.role === "assistant" && !last.isActive
            ? last
            : null;
      if (replaced) {
        replaced.el.remove();
        this.views.splice(this.views.indexOf(replaced), 1);
      }
      view = new MessageView({ role: "assistant", messageId: gen.message_id, onRegenerate: this.onRegenerate });
      this.append(view);
      this.pinned = true;
    }
    view.setGeneration(gen);
    this.refresh();
    return view;
  }

  byGeneration(id) {
    return this.views.find((v) => v.generationId === id) ?? null;
  }

  /** The answer still queued or running in this conversation, if any. */
  activeAnswer() {
    return this.views.findLast((v) => v.isActive) ?? null;
  }

  /** Shows a refused request in place, with a retry button. */
  addError(text, onRetry) {
    const box = document.createElement("div");
    box.className = "thread-error";
    box.setAttribute("role", "alert");
    const label = document.createElement("span");
    label.textContent = text;
    box.append(label);
    if (onRetry) {
      const retry = document.createElement("button");
      retry.type = "button";
      retry.className = "btn btn-small";
      retry.textContent = "Retry";
      retry.addEventListener("click", () => {
        box.remove();
        onRetry();
      });
      box.append(retry);
    }
    this.list.append(box);
    this.pinned = true;
    this.welcome.hidden = true;
  }

  refresh() {
    const lastAssistant = this.views.at(-1)?.role === "assistant" ? this.views.at(-1) : null;
    for (const view of this.views) view.setLast(view === lastAssistant);
    this.welcome.hidden = this.views.length > 0;
  }
}
