// An upstream for the gateway's tests written on node's own http module: node PORT
// GET /echo answers what it received; GET /weather/:city a JSON body in chunks (chunked encoding);
// GET /events server-sent events; GET /usage sets X-Usage from ?units; GET /reset resets the
// connection without an answer; anything else 404.
import http from "node:http";

const port = Number(process.argv[2]);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

http
  .createServer(async (req, res) => {
    const url = new URL(req.url, "http://upstream");
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    if (url.pathname === "/echo") {
      res.writeHead(200, { "Content-Type": "application/json", "X-Upstream": "node" });
      res.end(JSON.stringify({ method: req.method, path: url.pathname, headers: req.headers }));
    } else if (url.pathname.startsWith("/weather/")) {
      res.writeHead(200, { "Content-Type": "application/json", "Set-Cookie": ["a=1", "b=2"] });
      res.write('{"city": "' + url.pathname.slice(9) + '", ');
      await sleep(50);
      res.end('"forecast": "sunny"}');
    } else if (url.pathname === "/events") {
      res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
      for (let i = 0; i < 3; i++) {
        res.write(`data: ${i}\n\n`);
        await sleep(200);
      }
      res.end();
    } else if (url.pathname === "/reset") {
      req.socket.destroy(); // the connection reset, no answer at all
    } else if (url.pathname === "/usage") {
      res.writeHead(200, { "Content-Type": "application/json", "X-Usage": url.searchParams.get("units") || "0" });
      res.end("{}");
    } else {
      res.writeHead(404, { "Content-Type": "application/json" });
      res.end('{"error": "no such thing"}');
    }
  })
  .listen(port, "127.0.0.1");
