// Group chat: sends a message, then shows the group's replies as they stream (server-sent events
// over the POST response). Every piece of text is inserted with textContent, never as markup.
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
  const toggle = document.getElementById("show-directives");

  function showDirectives() {
    for (const item of transcript.querySelectorAll(".directive")) {
      item.classList.toggle("hidden", !toggle.checked);
    }
  }
  toggle.addEventListener("change", showDirectives);

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
    item.className = "directive" + (toggle.checked ? "" : " hidden");
    const note = data.fell_back ? " (the Director's answer was unusable: chosen at random)" : "";
    item.textContent = "Director \u2192 " + data.agent + ": " + data.action + " (tone: " + data.tone + ")" + note;
    transcript.append(item);
  }

  let current = null;
  const handlers = {
    directive: directiveLine,
    start: (d) => { current = line("turn agent streaming", d.agent, "who name c" + d.colour, ""); },
    token: (d) => { if (current) current.textContent += d.text; },
    discarded: (d) => { status.textContent = "A reply from " + d.agent + " opened as someone else and was discarded; asking again."; if (current) current.textContent = ""; },
    end: (d) => {
      if (current) {
        current.textContent = d.response || "(no reply)";
        current.parentElement.classList.remove("streaming");
      }
      current = null;
    },
    error: (d) => { status.textContent = d.message; },
    done: () => {},
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

  async function send(text) {
    const response = await fetch("/api/sessions/" + encodeURIComponent(sessionId) + "/messages", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
      body: JSON.stringify({ text: text }),
    });
    if (!response.ok) {
      const problem = await response.json().catch(() => ({}));
      const detail = typeof problem.detail === "string" ? problem.detail : "the message could not be sent";
      throw new Error(detail + " (" + response.status + ")");
    }
    line("turn user", "You", "who", text);
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        dispatch(buffer.slice(0, cut));
        buffer = buffer.slice(cut + 2);
      }
    }
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = input.value.trim();
    if (!text) return;
    sendButton.disabled = true;
    status.textContent = "";
    try {
      await send(text);
      input.value = "";
    } catch (error) {
      status.textContent = error.message;
    } finally {
      sendButton.disabled = false;
      input.focus();
    }
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
})();
