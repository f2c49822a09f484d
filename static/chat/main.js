// Entry point of the chat page: reads the boot data the server put in the page and starts the app.

import { ChatApp } from "./app.js";

const $ = (id) => {
  const node = document.getElementById(id);
  if (!node) throw new Error(`chat page is missing #${id}`);
  return node;
};

function setupDrawer() {
  const toggle = $("menu-toggle");
  const scrim = $("scrim");
  const setOpen = (open) => {
    document.body.classList.toggle("drawer-open", open);
    toggle.setAttribute("aria-expanded", String(open));
    scrim.hidden = !open;
    if (open) $("new-chat").focus();
  };
  toggle.addEventListener("click", () => setOpen(!document.body.classList.contains("drawer-open")));
  $("sidebar-close").addEventListener("click", () => {
    setOpen(false);
    toggle.focus();
  });
  scrim.addEventListener("click", () => setOpen(false));
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && document.body.classList.contains("drawer-open")) {
      setOpen(false);
      toggle.focus();
    }
  });
}

const boot = JSON.parse($("boot").textContent);
setupDrawer();
const app = new ChatApp(boot, $);
// Exposed for the browser tests (e.g. to drop the socket and watch it resume) and for debugging.
window.chatApp = app;
app.start();
