// The chat websocket (docs/protocol.md): one per tab, reconnecting by itself with backoff.
// Frames go out as JSON with a request_id; every frame that comes in is handed to onFrame.

const MAX_BACKOFF_MS = 8000;

export class ChatSocket {
  /**
   * @param {string} path e.g. "/ws/chat/"
   * @param {{onFrame: (frame: object) => void, onOpen: () => void, onState: (state: string) => void}} handlers
   */
  constructor(path, handlers) {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    this.url = `${scheme}//${location.host}${path}`;
    this.handlers = handlers;
    this.ws = null;
    this.attempt = 0;
    this.nextId = 1;
    this.retryTimer = 0;
    window.addEventListener("online", () => this.reconnectSoon(0));
    document.addEventListener("visibilitychange", () => {
      if (document.visibilityState === "visible") this.reconnectSoon(0);
    });
  }

  get isOpen() {
    return this.ws !== null && this.ws.readyState === WebSocket.OPEN;
  }

  connect() {
    if (this.ws && this.ws.readyState <= WebSocket.OPEN) return;
    clearTimeout(this.retryTimer);
    this.handlers.onState(this.attempt === 0 ? "connecting" : "reconnecting");
    const ws = new WebSocket(this.url);
    this.ws = ws;
    ws.addEventListener("open", () => {
      this.attempt = 0;
      this.handlers.onState("open");
      this.handlers.onOpen();
    });
    ws.addEventListener("message", (event) => {
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch {
        return; // the server only sends JSON; ignore anything else
      }
      if (frame && typeof frame.type === "string") this.handlers.onFrame(frame);
    });
    ws.addEventListener("close", (event) => {
      if (this.ws !== ws) return;
      this.ws = null;
      if (event.code === 4403 || event.code === 4401) {
        this.handlers.onState("refused");
        return;
      }
      this.handlers.onState("reconnecting");
      this.reconnectSoon(Math.min(MAX_BACKOFF_MS, 500 * 2 ** this.attempt));
      this.attempt += 1;
    });
  }

  reconnectSoon(delayMs) {
    if (this.ws) return;
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => this.connect(), delayMs);
  }

  /** Sends a frame; returns its request_id, or null when the socket is not open. */
  send(frame) {
    if (!this.isOpen) return null;
    const requestId = `r${this.nextId++}`;
    this.ws.send(JSON.stringify({ ...frame, request_id: requestId }));
    return requestId;
  }

  /** Drops the connection as a network failure would (used to test resume). */
  drop() {
    if (this.ws) this.ws.close(4000, "client drop");
  }
}
