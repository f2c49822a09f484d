// The conversation list: most recent first, with inline rename and delete for each entry.

export class ConversationList {
  /**
   * @param {{list: HTMLElement, empty: HTMLElement, onOpen: (id: string) => void,
   *          onRename: (id: string, title: string) => void, onDelete: (id: string) => void}} parts
   */
  constructor({ list, empty, onOpen, onRename, onDelete }) {
    this.list = list;
    this.empty = empty;
    this.onOpen = onOpen;
    this.onRename = onRename;
    this.onDelete = onDelete;
    this.items = new Map();
    this.currentId = null;
    this.editingId = null;
    this.editDraft = null;
  }

  /** Replaces the whole list (a `conversations` reply). */
  setAll(items) {
    this.items = new Map(items.map((c) => [c.id, c]));
    this.render();
  }

  /** Adds or updates one conversation (a `conversation` event). */
  upsert(conversation) {
    const known = this.items.get(conversation.id);
    this.items.set(conversation.id, { ...known, ...conversation });
    this.render();
  }

  /** Moves a conversation to the top after activity in it. */
  touch(id) {
    const item = this.items.get(id);
    if (!item) return;
    item.updated_at = new Date().toISOString();
    this.render();
  }

  remove(id) {
    this.items.delete(id);
    this.render();
  }

  setCurrent(id) {
    this.currentId = id;
    this.render();
  }

  title(id) {
    return this.items.get(id)?.title ?? null;
  }

  sorted() {
    return [...this.items.values()].sort((a, b) => (a.updated_at < b.updated_at ? 1 : a.updated_at > b.updated_at ? -1 : 0));
  }

  render() {
    const focusedId = document.activeElement?.closest?.("[data-conversation-id]")?.dataset.conversationId;
    const focusedRole = document.activeElement?.dataset?.role;
    this.list.replaceChildren(...this.sorted().map((c) => this.renderItem(c)));
    this.empty.hidden = this.items.size > 0;
    if (focusedId && focusedRole) {
      this.list.querySelector(`[data-conversation-id="${CSS.escape(focusedId)}"] [data-role="${focusedRole}"]`)?.focus();
    }
  }

  renderItem(conversation) {
    const li = document.createElement("li");
    li.className = "conversation";
    li.dataset.conversationId = conversation.id;
    if (conversation.id === this.currentId) li.classList.add("is-current");
    if (conversation.id === this.editingId) {
      li.append(this.renderEditor(conversation));
      return li;
    }
    const link = document.createElement("a");
    link.href = `/c/${conversation.id}`;
    link.className = "conversation-link";
    link.dataset.role = "open";
    link.textContent = conversation.title || "Untitled";
    link.title = conversation.title || "Untitled";
    if (conversation.id === this.currentId) link.setAttribute("aria-current", "page");
    link.addEventListener("click", (event) => {
      if (event.metaKey || event.ctrlKey || event.shiftKey || event.button !== 0) return;
      event.preventDefault();
      this.onOpen(conversation.id);
    });
    const rename = iconButton("rename", `Rename “${conversation.title || "Untitled"}”`, "M4 20h4L19 9l-4-4L4 16v4zM14 6l4 4");
    rename.addEventListener("click", () => {
      this.editingId = conversation.id;
      this.editDraft = null;
      this.render();
    });
    const del = iconButton("delete", `Delete “${conversation.title || "Untitled"}”`, "M5 7h14M10 11v6M14 11v6M7 7l1 13h8l1-13M9 7V4h6v3");
    del.addEventListener("click", () => {
      if (window.confirm(`Delete “${conversation.title || "Untitled"}”? This cannot be undone.`)) this.onDelete(conversation.id);
    });
    li.append(link, rename, del);
    return li;
  }

  renderEditor(conversation) {
    const form = document.createElement("form");
    form.className = "rename-form";
    const input = document.createElement("input");
    input.type = "text";
    input.maxLength = 200;
    input.required = true;
    input.value = this.editDraft ?? conversation.title ?? "";
    input.addEventListener("input", () => {
      this.editDraft = input.value;
    });
    input.setAttribute("aria-label", "New title");
    input.dataset.role = "title";
    const done = () => {
      this.editingId = null;
      this.render();
    };
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const title = input.value.trim();
      if (title && title !== conversation.title) {
        this.items.get(conversation.id).title = title;
        this.onRename(conversation.id, title);
      }
      done();
      this.list.querySelector(`[data-conversation-id="${CSS.escape(conversation.id)}"] a`)?.focus();
    });
    input.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.preventDefault();
        done();
      }
    });
    input.addEventListener("blur", () => {
      if (this.editingId === conversation.id) form.requestSubmit();
    });
    form.append(input);
    const fresh = this.editDraft === null;
    queueMicrotask(() => {
      input.focus();
      if (fresh) input.select();
    });
    return form;
  }
}

function iconButton(role, label, path) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "icon-btn conversation-action";
  button.dataset.role = role;
  button.setAttribute("aria-label", label);
  button.title = label;
  button.innerHTML = `<svg viewBox="0 0 24 24" aria-hidden="true"><path d="${path}"/></svg>`;
  return button;
}
