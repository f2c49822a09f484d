// The message box: Enter sends, Shift+Enter adds a line, it grows with its text, and Send turns into Stop
// while the open conversation has an answer queued or streaming.

const MAX_HEIGHT_PX = 200;

export class Composer {
  /** @param {{form: HTMLFormElement, input: HTMLTextAreaElement, send: HTMLElement, stop: HTMLElement,
   *           onSend: (text: string) => boolean, onStop: () => void}} parts */
  constructor({ form, input, send, stop, onSend, onStop }) {
    this.form = form;
    this.input = input;
    this.sendButton = send;
    this.stopButton = stop;
    this.onSend = onSend;
    this.busy = false;
    this.online = false;
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.submit();
      }
    });
    input.addEventListener("input", () => this.autosize());
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.submit();
    });
    stop.addEventListener("click", () => onStop());
  }

  submit() {
    const text = this.input.value;
    if (this.busy || !this.online || text.trim() === "") return;
    if (this.onSend(text)) {
      this.input.value = "";
      this.autosize();
    }
  }

  autosize() {
    this.input.style.height = "auto";
    this.input.style.height = `${Math.min(this.input.scrollHeight, MAX_HEIGHT_PX)}px`;
  }

  setLimit(maxChars) {
    if (Number.isInteger(maxChars) && maxChars > 0) this.input.maxLength = maxChars;
  }

  /** busy: an answer is active here (show Stop); online: the socket is open (Send can work). */
  setState({ busy = this.busy, online = this.online } = {}) {
    const stopHadFocus = document.activeElement === this.stopButton;
    this.busy = busy;
    this.online = online;
    this.stopButton.hidden = !busy;
    this.sendButton.hidden = busy;
    this.sendButton.disabled = !online;
    if (stopHadFocus && !busy) this.input.focus();
  }

  focus() {
    this.input.focus();
  }
}
