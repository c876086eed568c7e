// A minimal WebSocket client (RFC 6455) for firefox.mjs's WebDriver BiDi
// connection: text messages only, over plain TCP to 127.0.0.1. Node 20, the
// oldest Node the suite supports, has no WebSocket without a flag, and the
// suite takes no client library for one connection.
import { randomBytes } from "node:crypto";
import { request } from "node:http";

/** Opens `url` (ws://host:port/path); resolves to a socket once the handshake is done. */
export function connect(url) {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request({
      host: u.hostname,
      port: u.port,
      path: u.pathname,
      headers: {
        Connection: "Upgrade",
        Upgrade: "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": randomBytes(16).toString("base64"),
      },
    });
    req.on("upgrade", (_res, socket, head) => resolve(new WebSocketClient(socket, head)));
    req.on("response", (res) => reject(new Error(`WebSocket ${url}: HTTP ${res.statusCode}, no upgrade`)));
    req.on("error", reject);
    req.end();
  });
}

class WebSocketClient {
  #socket;
  #buffer;
  /** The pieces of a message sent in several frames. */
  #parts = [];
  /** Called with each text message. */
  onmessage = () => {};
  /** Called once when the connection ends, with the reason. */
  onclose = () => {};

  constructor(socket, head) {
    this.#socket = socket;
    this.#buffer = head;
    socket.on("data", (d) => {
      this.#buffer = Buffer.concat([this.#buffer, d]);
      this.#readFrames();
    });
    socket.on("close", () => this.onclose("connection closed"));
    socket.on("error", (e) => this.onclose(String(e)));
    this.#readFrames();
  }

  send(text) {
    this.#write(0x1, Buffer.from(text, "utf8"));
  }

  close() {
    this.#socket.destroy();
  }

  #readFrames() {
    for (;;) {
      const b = this.#buffer;
      if (b.length < 2) return;
      let len = b[1] & 0x7f;
      let at = 2;
      if (len === 126) {
        if (b.length < 4) return;
        len = b.readUInt16BE(2);
        at = 4;
      } else if (len === 127) {
        if (b.length < 10) return;
        len = Number(b.readBigUInt64BE(2));
        at = 10;
      }
      // A server's frames are not masked.
      if (b.length < at + len) return;
      const fin = (b[0] & 0x80) !== 0;
      const opcode = b[0] & 0x0f;
      const payload = b.subarray(at, at + len);
      this.#buffer = b.subarray(at + len);
      if (opcode === 0x8) {
        this.#socket.destroy();
        return;
      }
      if (opcode === 0x9) {
        this.#write(0xa, payload);
        continue;
      }
      if (opcode === 0x1 || opcode === 0x0) {
        this.#parts.push(payload);
        if (fin) {
          const text = Buffer.concat(this.#parts).toString("utf8");
          this.#parts = [];
          this.onmessage(text);
        }
      }
    }
  }

  /** A client's frames are masked (RFC 6455 5.3). */
  #write(opcode, payload) {
    const len = payload.length;
    const header = len < 126 ? Buffer.alloc(2) : len < 65536 ? Buffer.alloc(4) : Buffer.alloc(10);
    header[0] = 0x80 | opcode;
    if (len < 126) header[1] = 0x80 | len;
    else if (len < 65536) {
      header[1] = 0x80 | 126;
      header.writeUInt16BE(len, 2);
    } else {
      header[1] = 0x80 | 127;
      header.writeBigUInt64BE(BigInt(len), 2);
    }
    const mask = randomBytes(4);
    const masked = Buffer.alloc(len);
    for (let i = 0; i < len; i++) masked[i] = payload[i] ^ mask[i & 3];
    this.#socket.write(Buffer.concat([header, mask, masked]));
  }
}
