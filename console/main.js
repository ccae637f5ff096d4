// The console's entry: the stylesheets, and a router over the location's hash (#/chat,
// #/transcribe, #/models, #/models/<slug>, #/server, #/usage). Each page renders into <main> and returns
// what stops it (timers, charts) when another page is shown.
import "uplot/dist/uPlot.min.css";
import "./style.css";
import { chatPage } from "./chat.js";
import { modelsPage, trackPage } from "./models.js";
import { serverPage } from "./server.js";
import { transcribePage } from "./transcribe.js";
import { usagePage } from "./usage.js";
import { getJson } from "./lib.js";

const main = document.getElementById("main");
let stop = () => {};

function route() {
  stop();
  const [, page = "chat", arg] = location.hash.split("/");
  main.replaceChildren();
  for (const link of document.querySelectorAll("nav a")) {
    if (link.getAttribute("href") === `#/${page}`) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  const render =
    page === "models" && arg
      ? (m) => trackPage(m, decodeURIComponent(arg))
      : ({ chat: chatPage, transcribe: transcribePage, models: modelsPage, server: serverPage, usage: usagePage }[page] ?? chatPage);
  stop = render(main) ?? (() => {});
}

addEventListener("hashchange", route);
route();
// The mode decides what the console offers: the usage page in cloud mode (where this call answers
// 401 until a key is given, which shows the key field).
getJson("/console/api/session")
  .then((session) => (document.getElementById("usage-link").hidden = !session.usage))
  .catch(() => {});
