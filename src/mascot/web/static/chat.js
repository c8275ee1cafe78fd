// Group chat: sends a message, then shows the group's replies as they stream (server-sent events
// over the POST response). Every piece of text is inserted with textContent, never as markup.
// While the group answers, the activity line says who is being chosen and who is typing, and
// nothing sends again (the button and Enter both wait) while the box stays free to write in.
"use strict";

(function () {
  const chat = document.getElementById("chat");
  if (!chat) return;
  const sessionId = chat.dataset.session;
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const transcript = document.getElementById("transcript");
  const form = document.getElementById("message-form");
  const input = document.getElementById("message");
  const sendButton = document.getElementById("send");
  const status = document.getElementById("status");
  const activity = document.getElementById("activity");
  const toggle = document.getElementById("show-directives");
  const CHOOSING = "The Director is choosing who answers\u2026";
  const UNREACHABLE = "The app could not be reached: check that mascot web is still running, then send again.";
  const CUT_OFF = "The connection to the app was lost before the group finished: your message is saved. Reload the page to see what was kept, then send again.";
  const ANOTHER = [
    ["reply", "another reply", "The same companion writes another reply"],
    ["direction", "another approach", "The Director decides again who answers, and how"],
  ];
  let busy = false;
  let finished = false; // the current reply's stream said "done"
  let retryNote = null; // the status line of a discarded reply, cleared once its retry ends

  function showDirectives() {
    for (const item of transcript.querySelectorAll(".directive")) {
      item.classList.toggle("hidden", !toggle.checked);
    }
  }
  toggle.addEventListener("change", showDirectives);

  function setBusy(on) {
    busy = on;
    sendButton.disabled = on;
    form.setAttribute("aria-busy", on ? "true" : "false");
  }

  function showActivity(text) {
    activity.textContent = text;
    activity.classList.toggle("hidden", !text);
  }

  function showStatus(text) {
    status.textContent = text;
    retryNote = null;
  }

  function line(classes, who, whoClasses, text) {
    const item = document.createElement("li");
    item.className = classes;
    const name = document.createElement("span");
    name.className = whoClasses;
    name.textContent = who;
    const body = document.createElement("span");
    body.className = "text";
    body.textContent = text;
    item.append(name, " ", body);
    transcript.append(item);
    item.scrollIntoView({ block: "end" });
    return body;
  }

  function directiveLine(data) {
    const item = document.createElement("li");
    item.className = "directive" + (data.fallback ? " fallback" : "") + (toggle.checked ? "" : " hidden");
    // a fallback is said as such, never shown as the Director's instruction
    const said = data.fallback ? "(" + data.fallback + ")" : data.action + " (tone: " + data.tone + ")";
    item.textContent = "Director \u2192 " + data.agent + ": " + said;
    transcript.append(item);
    showActivity(data.agent + " is typing\u2026");
  }

  // Helpful / not helpful under each companion's reply; the newest choice counts, and is kept.
  const RATING_LABELS = { helpful: "helpful", not_helpful: "not helpful" };
  function addRatingButtons(item, turnIdx) {
    if (chat.dataset.feedback !== "on" || turnIdx === undefined) return;
    const box = document.createElement("span");
    box.className = "rate";
    box.dataset.turn = String(turnIdx);
    for (const [value, label] of Object.entries(RATING_LABELS)) {
      const button = document.createElement("button");
      button.type = "button";
      button.dataset.rating = value;
      button.setAttribute("aria-pressed", "false");
      button.textContent = label;
      box.append(button);
    }
    for (const older of transcript.querySelectorAll(".rate .another, .choice")) older.remove(); // only the latest reply
    for (const [of, label, title] of ANOTHER) {
      const another = document.createElement("button");
      another.type = "button";
      another.className = "another";
      another.dataset.of = of;
      another.title = title;
      another.textContent = label;
      box.append(another);
    }
    item.append(box);
  }

  async function feedbackPost(what, body) {
    let response;
    try {
      response = await fetch("/api/sessions/" + encodeURIComponent(sessionId) + "/" + what, {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
        body: JSON.stringify(body),
      });
    } catch (error) {
      showStatus(UNREACHABLE);
      return null;
    }
    if (!response.ok) {
      showStatus(await refusal(response));
      return null;
    }
    return response.json();
  }

  // "another reply": a second reply to the same moment, shown beside the first; the person keeps one.
  // "another approach": the Director decides again (who answers, and how), and that companion replies.
  async function askAnother(button) {
    const box = button.parentElement;
    const item = box.parentElement;
    const turn = Number(box.dataset.turn);
    const of = button.dataset.of || "reply";
    button.disabled = true;
    showActivity(of === "direction" ? CHOOSING : item.querySelector(".who").textContent + " is writing another reply\u2026");
    const answer = await feedbackPost("alternative", { turn_idx: turn, of: of });
    showActivity("");
    button.disabled = false;
    if (!answer) return;
    for (const older of item.querySelectorAll(".choice")) older.remove();
    const choice = document.createElement("div");
    choice.className = "choice";
    choice.dataset.turn = String(turn);
    choice.dataset.of = of;
    const question = document.createElement("span");
    question.textContent = of === "direction" ? "Another approach, " + answer.agent + " (" + answer.action + "; tone: " + answer.tone + "): " : "Another reply: ";
    if (of === "direction") choice.dataset.agent = answer.agent;
    const text = document.createElement("span");
    text.className = "alternative";
    text.textContent = answer.text;
    const keep = document.createElement("button");
    keep.type = "button";
    keep.dataset.chosen = "shown";
    keep.textContent = "keep the first";
    const use = document.createElement("button");
    use.type = "button";
    use.dataset.chosen = "alternative";
    use.textContent = "use this one";
    choice.append(question, text, " ", keep, use);
    item.append(choice);
  }

  async function choose(button) {
    const choice = button.parentElement;
    const item = choice.parentElement;
    const answer = await feedbackPost("choice", { turn_idx: Number(choice.dataset.turn), chosen: button.dataset.chosen });
    if (!answer) return;
    if (button.dataset.chosen === "alternative") {
      item.querySelector(".text").textContent = answer.response;
      if (choice.dataset.of === "direction") {
        const who = item.querySelector(".who");
        who.textContent = answer.agent;
        who.className = "who name c" + answer.colour;
        const line = item.previousElementSibling;
        if (line && line.classList.contains("directive")) line.textContent = "Director \u2192 " + answer.agent + ": (chosen from two approaches)";
      }
      for (const rated of item.querySelectorAll(".rate button[data-rating]")) rated.setAttribute("aria-pressed", "false"); // a new reply, not yet rated
    }
    choice.remove();
  }

  transcript.addEventListener("click", async (event) => {
    const button = event.target.closest("button");
    if (!button || busy) return;
    if (button.classList.contains("another")) return askAnother(button);
    if (button.dataset.chosen) return choose(button);
    if (!button.dataset.rating) return;
    const box = button.parentElement;
    const answer = await feedbackPost("feedback", { turn_idx: Number(box.dataset.turn), rating: button.dataset.rating });
    if (!answer) return;
    for (const other of box.querySelectorAll("button[data-rating]")) other.setAttribute("aria-pressed", other === button ? "true" : "false");
  });

  let current = null;
  const handlers = {
    directive: directiveLine,
    start: (d) => {
      current = line("turn agent streaming", d.agent, "who name c" + d.colour, "");
      showActivity(d.agent + " is typing\u2026");
    },
    token: (d) => { if (current) current.textContent += d.text; },
    discarded: (d) => {
      showStatus("A reply from " + d.agent + " opened as someone else and was discarded; asking again.");
      retryNote = status.textContent;
      if (current) current.textContent = "";
    },
    end: (d) => {
      if (current) {
        current.textContent = d.response || "(no reply)";
        current.parentElement.classList.remove("streaming");
        if (d.response) addRatingButtons(current.parentElement, d.turn_idx);
      }
      current = null;
      if (retryNote !== null && status.textContent === retryNote) showStatus("");
      showActivity(CHOOSING);
    },
    error: (d) => { showStatus(d.message); showActivity(""); },
    done: () => { finished = true; showActivity(""); },
  };

  function dispatch(block) {
    let kind = "message";
    const data = [];
    for (const row of block.split("\n")) {
      if (row.startsWith("event:")) kind = row.slice(6).trim();
      else if (row.startsWith("data:")) data.push(row.slice(5).trim());
    }
    if (data.length && handlers[kind]) handlers[kind](JSON.parse(data.join("\n")));
  }

  // The server's explanation of a refusal: its JSON detail or its one plain line, never a code.
  async function refusal(response) {
    const type = response.headers.get("content-type") || "";
    if (type.includes("application/json")) {
      const problem = await response.json().catch(() => ({}));
      if (typeof problem.detail === "string" && problem.detail) return problem.detail;
    } else if (type.startsWith("text/plain")) {
      const text = (await response.text().catch(() => "")).trim();
      if (text && text.length < 300) return text;
    }
    return "The message could not be sent. Reload the page and try again.";
  }

  async function post(text) {
    try {
      return await fetch("/api/sessions/" + encodeURIComponent(sessionId) + "/messages", {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
        body: JSON.stringify({ text: text }),
      });
    } catch (error) {
      throw new Error(UNREACHABLE);
    }
  }

  // Resolves when the group's answer has ended; `accepted` runs once the server has the message.
  async function send(text, accepted) {
    const response = await post(text);
    if (!response.ok) throw new Error(await refusal(response));
    accepted();
    line("turn user", "You", "who", text);
    finished = false;
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      let chunk;
      try {
        chunk = await reader.read();
      } catch (error) {
        throw new Error(CUT_OFF);
      }
      if (chunk.done) {
        // The stream ended without its "done" event: the server went away mid-reply.
        if (!finished) throw new Error(CUT_OFF);
        break;
      }
      buffer += chunk.value;
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        dispatch(buffer.slice(0, cut));
        buffer = buffer.slice(cut + 2);
      }
    }
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (busy) return;
    const text = input.value.trim();
    if (!text) return;
    setBusy(true);
    showStatus("");
    showActivity(CHOOSING);
    input.value = ""; // the box is free for the next message while the group answers
    let sent = false;
    try {
      await send(text, () => { sent = true; });
    } catch (error) {
      showStatus(error.message);
      if (!sent && !input.value.trim()) input.value = text; // refused: the text comes back to edit
    } finally {
      setBusy(false);
      showActivity("");
      input.focus();
    }
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault(); // Enter sends, and only when the group is not answering
      if (!busy) form.requestSubmit();
    }
  });
})();
