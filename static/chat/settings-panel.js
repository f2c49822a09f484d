// The per-conversation settings form: system prompt, temperature, top_p and max tokens.
// Blank number fields mean "server default" and are left out of `params`.

const FIELDS = [
  { name: "temperature", id: "set-temperature", min: 0, max: 2, integer: false, label: "Temperature" },
  { name: "top_p", id: "set-top-p", min: 0, max: 1, integer: false, label: "Top p", openMin: true },
  { name: "max_tokens", id: "set-max-tokens", min: 1, max: null, integer: true, label: "Max tokens" },
];

export class SettingsPanel {
  /** @param {{form: HTMLFormElement, toggle: HTMLElement, close: HTMLElement, note: HTMLElement, onSave: (v: object) => void}} parts */
  constructor({ form, toggle, close, note, onSave }) {
    this.form = form;
    this.toggle = toggle;
    this.note = note;
    this.onSave = onSave;
    this.maxTokens = null;
    this.system = form.querySelector("#set-system");
    toggle.addEventListener("click", () => this.setOpen(form.hidden));
    close.addEventListener("click", () => this.setOpen(false));
    form.addEventListener("keydown", (event) => {
      if (event.key === "Escape") this.setOpen(false);
    });
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const result = this.read();
      if (result.error) {
        this.say(result.error);
        result.input?.focus();
        return;
      }
      this.say("Saving…");
      this.onSave(result.values);
    });
  }

  setOpen(open) {
    this.form.hidden = !open;
    this.toggle.setAttribute("aria-expanded", String(open));
    if (open) this.system.focus();
    else this.toggle.focus();
  }

  say(text) {
    this.note.textContent = text;
  }

  setLimits(limits) {
    if (limits && Number.isInteger(limits.max_tokens)) {
      this.maxTokens = limits.max_tokens;
      this.form.querySelector("#set-max-tokens").max = String(limits.max_tokens);
    }
  }

  /** Shows a conversation's settings ({system_prompt, params}), or blanks for a new chat. */
  fill(settings) {
    this.system.value = settings?.system_prompt ?? "";
    const params = settings?.params ?? {};
    for (const field of FIELDS) {
      const value = params[field.name];
      this.form.querySelector(`#${field.id}`).value = value === undefined || value === null ? "" : String(value);
    }
    this.say("");
  }

  /** The form's values, checked against the protocol's ranges. */
  read() {
    const params = {};
    for (const field of FIELDS) {
      const input = this.form.querySelector(`#${field.id}`);
      const raw = input.value.trim();
      if (raw === "") continue;
      const value = Number(raw);
      const max = field.name === "max_tokens" ? this.maxTokens : field.max;
      const tooLow = field.openMin ? value <= field.min : value < field.min;
      if (!Number.isFinite(value) || tooLow || (max !== null && value > max) || (field.integer && !Number.isInteger(value))) {
        const range = field.openMin ? `(${field.min}, ${max}]` : `[${field.min}, ${max ?? "model limit"}]`;
        return { error: `${field.label} must be ${field.integer ? "a whole number" : "a number"} in ${range}.`, input };
      }
      params[field.name] = value;
    }
    return { values: { system_prompt: this.system.value, params } };
  }
}
