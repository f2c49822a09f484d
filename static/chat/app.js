// The chat controller: turns socket frames (docs/protocol.md) into view updates and user actions into frames.
// The server is the source of truth: on every (re)connect the page asks for the list and the open conversation
// again, so a reload or a dropped socket picks up every answer where it is, still streaming.

import { ChatSocket } from "./socket.js";
import { ConversationList } from "./sidebar.js";
import { Composer } from "./composer.js";
import { SettingsPanel } from "./settings-panel.js";
import { ThreadView } from "./thread.js";

const CONNECTION_LABELS = {
  connecting: "Connecting…",
  reconnecting: "Reconnecting…",
  refused: "Not allowed to connect; reload the page",
  open: "",
};

export class ChatApp {
  /** @param {{conversationId: string|null, socketPath: string}} boot */
  constructor(boot, $) {
    this.$ = $;
    this.currentId = boot.conversationId;
    this.loading = Boolean(this.currentId); // until the server's history for it arrives
    this.pending = new Map(); // request_id -> {kind, retry?}
    this.newChatSettings = { system_prompt: "", params: {} };
    this.resumeAsked = new Set();

    this.sidebar = new ConversationList({
      list: $("conversation-list"),
      empty: $("conversation-empty"),
      onOpen: (id) => this.open(id),
      onRename: (id, title) => this.request({ type: "rename", conversation_id: id, title }, { kind: "rename" }),
      onDelete: (id) => this.request({ type: "delete", conversation_id: id }, { kind: "delete" }),
    });
    this.thread = new ThreadView({
      scroller: $("thread"),
      list: $("messages"),
      welcome: $("welcome"),
      onRegenerate: () => this.regenerate(),
    });
    this.composer = new Composer({
      form: $("composer"),
      input: $("prompt"),
      send: $("send"),
      stop: $("stop"),
      onSend: (text) => this.send(text),
      onStop: () => this.stop(),
    });
    this.settings = new SettingsPanel({
      form: $("settings-panel"),
      toggle: $("settings-toggle"),
      close: $("settings-cancel"),
      note: $("settings-note"),
      onSave: (values) => this.saveSettings(values),
    });
    this.socket = new ChatSocket(boot.socketPath, {
      onFrame: (frame) => this.onFrame(frame),
      onOpen: () => this.onOpen(),
      onState: (state) => this.onConnection(state),
    });
    $("new-chat").addEventListener("click", () => this.newChat());
    $("demo-banner-close").addEventListener("click", () => {
      sessionStorage.setItem("demo-banner-hidden", "1");
      $("demo-banner").hidden = true;
      this.composer.focus();
    });
    window.addEventListener("popstate", () => {
      const match = location.pathname.match(/^\/c\/([0-9a-f-]{36})$/i);
      if (match) this.open(match[1], { push: false });
      else this.newChat({ push: false });
    });
    if (this.currentId) this.showLoading();
    else this.settings.fill(this.newChatSettings);
  }

  start() {
    this.socket.connect();
    this.composer.focus();
  }

  // ---- outgoing ----

  request(frame, meta) {
    const id = this.socket.send(frame);
    if (id === null) {
      this.thread.addError("Not connected. Reconnecting…");
      return null;
    }
    if (meta) this.pending.set(id, meta);
    return id;
  }

  onOpen() {
    this.pending.clear(); // replies to frames sent on the old socket will not come
    this.socket.send({ type: "list" });
    if (this.currentId) {
      this.loading = true;
      this.request({ type: "load", conversation_id: this.currentId }, { kind: "load" });
    }
  }

  send(text) {
    const frame = { type: "send", conversation_id: this.currentId, content: text };
    if (!this.currentId) {
      const { system_prompt, params } = this.newChatSettings;
      if (system_prompt) frame.system_prompt = system_prompt;
      if (Object.keys(params).length) frame.params = params;
    }
    const retry = () => {
      if (!this.composer.busy) this.send(text);
    };
    const id = this.request(frame, { kind: frame.conversation_id ? "send" : "create", retry, text });
    return id !== null;
  }

  stop() {
    const answer = this.thread.activeAnswer();
    if (answer?.generationId) this.request({ type: "cancel", generation_id: answer.generationId }, { kind: "cancel" });
  }

  regenerate() {
    if (!this.currentId || this.thread.activeAnswer()) return;
    this.request({ type: "regenerate", conversation_id: this.currentId }, { kind: "regenerate", retry: () => this.regenerate() });
  }

  saveSettings(values) {
    if (!this.currentId) {
      this.newChatSettings = values;
      this.settings.say("Saved; used when this chat starts.");
      return;
    }
    this.request({ type: "settings", conversation_id: this.currentId, ...values }, { kind: "settings" });
  }

  // ---- navigation ----

  open(id, { push = true } = {}) {
    this.closeDrawer();
    if (id === this.currentId && !this.loading) return;
    this.currentId = id;
    if (push) history.pushState({ id }, "", `/c/${id}`);
    this.showLoading();
    this.loading = true;
    this.request({ type: "load", conversation_id: id }, { kind: "load" });
  }

  newChat({ push = true } = {}) {
    this.closeDrawer();
    this.currentId = null;
    this.loading = false;
    if (push && location.pathname !== "/") history.pushState({}, "", "/");
    this.thread.clear();
    this.sidebar.setCurrent(null);
    this.setTitle("New chat");
    this.newChatSettings = { system_prompt: "", params: {} };
    this.settings.fill(this.newChatSettings);
    this.updateBusy();
    this.composer.focus();
  }

  showLoading() {
    this.thread.clear();
    this.$("welcome").hidden = true;
    this.sidebar.setCurrent(this.currentId);
    this.setTitle(this.sidebar.title(this.currentId) ?? "Loading…");
    this.updateBusy();
  }

  closeDrawer() {
    document.body.classList.remove("drawer-open");
    this.$("menu-toggle").setAttribute("aria-expanded", "false");
    this.$("scrim").hidden = true;
  }

  setTitle(title) {
    this.$("chat-title").textContent = title;
    document.title = `${title} · llmchat`;
  }

  updateBusy() {
    this.composer.setState({ busy: Boolean(this.thread.activeAnswer()) });
  }

  onConnection(state) {
    this.$("conn-status").textContent = CONNECTION_LABELS[state] ?? "";
    this.$("conn-status").dataset.state = state;
    this.composer.setState({ online: state === "open" });
  }

  // ---- incoming ----

  onFrame(frame) {
    const meta = frame.request_id ? this.pending.get(frame.request_id) : undefined;
    if (frame.request_id) this.pending.delete(frame.request_id); // later replies to it need no context
    const handler = this[`on_${frame.type}`];
    if (handler) handler.call(this, frame, meta);
  }

  on_hello(frame) {
    this.$("demo-banner").hidden = !frame.model?.is_demo || sessionStorage.getItem("demo-banner-hidden") === "1";
    this.composer.setLimit(frame.limits?.max_message_chars);
    this.settings.setLimits(frame.limits);
  }

  on_conversations(frame) {
    this.sidebar.setAll(frame.items ?? []);
    this.sidebar.setCurrent(this.currentId);
    if (this.currentId && this.sidebar.title(this.currentId)) this.setTitle(this.sidebar.title(this.currentId));
  }

  on_conversation(frame, meta) {
    const conversation = frame.conversation;
    this.sidebar.upsert(conversation);
    if (meta?.kind === "create" && !this.currentId) {
      this.currentId = conversation.id;
      this.loading = false;
      history.pushState({ id: conversation.id }, "", `/c/${conversation.id}`);
      this.sidebar.setCurrent(conversation.id);
    }
    if (conversation.id !== this.currentId) return;
    this.setTitle(conversation.title || "Untitled");
    if (meta?.kind === "settings" || meta?.kind === "create" || this.settings.form.hidden) this.settings.fill(conversation);
    if (meta?.kind === "settings") this.settings.say("Saved.");
  }

  on_history(frame) {
    if (frame.conversation?.id !== this.currentId) return;
    this.loading = false;
    this.sidebar.upsert(frame.conversation);
    this.sidebar.setCurrent(this.currentId);
    this.setTitle(frame.conversation.title || "Untitled");
    this.settings.fill(frame.conversation);
    this.thread.load(frame.messages ?? []);
    this.updateBusy();
  }

  on_message(frame) {
    const message = frame.message;
    if (this.loading || !this.currentId) return;
    if (message.conversation_id && message.conversation_id !== this.currentId) return;
    this.thread.addMessage(message);
    this.sidebar.touch(this.currentId);
  }

  on_deleted(frame) {
    this.sidebar.remove(frame.conversation_id);
    if (frame.conversation_id === this.currentId) this.newChat();
  }

  on_generation(frame) {
    this.applyGeneration(frame.generation, { create: true, replacesMessageId: frame.replaces_message_id ?? null });
  }

  on_snapshot(frame) {
    this.resumeAsked.delete(frame.generation.id);
    this.applyGeneration(frame.generation);
  }

  on_done(frame) {
    this.resumeAsked.delete(frame.generation.id);
    this.applyGeneration(frame.generation);
  }

  applyGeneration(gen, options = {}) {
    if (this.loading || gen.conversation_id !== this.currentId) return;
    this.thread.upsertGeneration(gen, options);
    this.updateBusy();
  }

  on_queued(frame) {
    this.thread.byGeneration(frame.generation_id)?.setQueued(frame.position);
  }

  on_started(frame) {
    this.thread.byGeneration(frame.generation_id)?.setStarted();
  }

  on_delta(frame) {
    const view = this.thread.byGeneration(frame.generation_id);
    if (!view) return;
    if (view.applyDelta(frame.seq, frame.text) === "gap" && !this.resumeAsked.has(view.generationId)) {
      this.resumeAsked.add(view.generationId);
      this.socket.send({ type: "resume", generation_id: view.generationId, after_seq: view.seq });
    }
  }

  on_error(frame, meta) {
    const wait = frame.retry_after ? ` Try again in ${Math.ceil(frame.retry_after)} s.` : "";
    const text = `${frame.message || "The request was refused."}${wait}`;
    switch (meta?.kind) {
      case "load":
        this.loading = false;
        this.newChat({ push: false });
        history.replaceState({}, "", "/");
        this.thread.addError(frame.code === "not_found" ? "That conversation does not exist (or is not yours)." : text);
        break;
      case "settings":
        this.settings.say(text);
        break;
      case "rename":
        this.socket.send({ type: "list" });
        this.thread.addError(`Rename failed: ${text}`);
        break;
      case "send":
      case "create":
        if (frame.code === "no_worker") {
          this.thread.addError(text); // the answer stays queued and starts when a worker is back
        } else if (frame.code === "busy") {
          this.thread.addError(`Not sent: ${text}`, meta.retry);
        } else {
          // Something about the message itself: give it back to edit.
          if (!this.composer.input.value) this.composer.input.value = meta.text;
          this.composer.autosize();
          this.thread.addError(`Not sent: ${text}`);
        }
        break;
      default:
        this.thread.addError(text, meta?.retry);
    }
  }
}
