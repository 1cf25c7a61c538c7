// The pai.v1 API over the Connect JSON protocol, with fetch.
//
// Unary calls POST JSON; server streams (StreamRun, WatchThread) POST one
// enveloped request and read enveloped frames from the response body's
// ReadableStream: a flag byte, a 4-byte big-endian length, then JSON. The
// end frame (flag 2) carries the error, if any. The token is read from
// sessionStorage for each call and only ever sent in the Authorization header.

const TOKEN_KEY = "pai.console.token";

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** An API error: the Connect code, message, and the ErrorInfo reason. */
export class ApiError extends Error {
  constructor(code, message, details) {
    super(message || code);
    this.code = code;
    this.details = details || [];
    this.reason = errorReason(this.details);
  }
}

function headers(contentType) {
  const h = { "content-type": contentType, "connect-protocol-version": "1" };
  const t = token();
  if (t) h.authorization = `Bearer ${t}`;
  return h;
}

// google.rpc.ErrorInfo is binary protobuf in the details: field 1 (reason) is
// a length-delimited string; read just that.
function errorReason(details) {
  for (const d of details) {
    if (d.type !== "google.rpc.ErrorInfo" || !d.value) continue;
    try {
      const pad = "=".repeat((4 - (d.value.length % 4)) % 4);
      const bytes = Uint8Array.from(atob(d.value.replace(/-/g, "+").replace(/_/g, "/") + pad), (c) =>
        c.charCodeAt(0),
      );
      let i = 0;
      while (i < bytes.length) {
        const tag = bytes[i++];
        let len = 0;
        let shift = 0;
        let b;
        do {
          b = bytes[i++];
          len |= (b & 0x7f) << shift;
          shift += 7;
        } while (b & 0x80);
        if (tag === 0x0a) return new TextDecoder().decode(bytes.subarray(i, i + len));
        i += len;
      }
    } catch {
      return "";
    }
  }
  return "";
}

function toError(body, status) {
  if (body && typeof body === "object" && body.code) {
    return new ApiError(body.code, body.message, body.details);
  }
  return new ApiError("unknown", `HTTP ${status}`);
}

/** Call a unary method, e.g. call("ThreadService", "GetThread", {threadId}). */
export async function call(service, method, request = {}) {
  const response = await fetch(`/pai.v1.${service}/${method}`, {
    method: "POST",
    headers: headers("application/json"),
    body: JSON.stringify(request),
  });
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (!response.ok) throw toError(body, response.status);
  return body;
}

function envelope(json) {
  const payload = new TextEncoder().encode(JSON.stringify(json));
  const out = new Uint8Array(5 + payload.length);
  new DataView(out.buffer).setUint32(1, payload.length);
  out.set(payload, 5);
  return out;
}

/**
 * Call a server-streaming method; onMessage(message) for each response.
 * Resolves when the stream ends cleanly; rejects with an ApiError (or a
 * TypeError when the connection drops). signal aborts it; onOpen() runs once
 * the server has accepted the call.
 */
export async function stream(service, method, request, onMessage, signal, onOpen) {
  const response = await fetch(`/pai.v1.${service}/${method}`, {
    method: "POST",
    headers: headers("application/connect+json"),
    body: envelope(request),
    signal,
  });
  if (!response.ok) {
    let body = null;
    try {
      body = await response.json();
    } catch {
      body = null;
    }
    throw toError(body, response.status);
  }
  if (onOpen) onOpen();
  const reader = response.body.getReader();
  let buffer = new Uint8Array(0);
  let ended = false;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    const joined = new Uint8Array(buffer.length + value.length);
    joined.set(buffer);
    joined.set(value, buffer.length);
    buffer = joined;
    while (buffer.length >= 5) {
      const flags = buffer[0];
      const size = new DataView(buffer.buffer, buffer.byteOffset).getUint32(1);
      if (buffer.length < 5 + size) break;
      const json = JSON.parse(new TextDecoder().decode(buffer.subarray(5, 5 + size)) || "{}");
      buffer = buffer.subarray(5 + size);
      if (flags & 2) {
        ended = true;
        if (json.error) throw toError(json.error, 200);
      } else {
        onMessage(json);
      }
    }
  }
  if (!ended) throw new TypeError("the stream was cut off");
}
