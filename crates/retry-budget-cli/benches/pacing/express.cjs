// express-rate-limit, 10 requests per 2 s window, as a limiter for
// benches/pacing.sh. Usage:
//
//   NODE_PATH=.../node_modules node express.cjs PORT draft-8|draft-7 LOG
//
// Every response of the limited route appends one line to LOG:
// `<milliseconds since start> <status>`; the script counts the 429s there.
// GET /health is not limited (the script's readiness probe).
"use strict";
const fs = require("fs");
const express = require("express");
const { rateLimit } = require("express-rate-limit");

const [port, mode, log] = process.argv.slice(2);
if (!port || !["draft-8", "draft-7"].includes(mode) || !log) {
  console.error("usage: express.cjs PORT draft-8|draft-7 LOG");
  process.exit(2);
}
const start = Date.now();
fs.writeFileSync(log, "");

const app = express();
app.get("/health", (_req, res) => res.send("ok\n"));
app.use((_req, res, next) => {
  res.on("finish", () => fs.appendFileSync(log, `${Date.now() - start} ${res.statusCode}\n`));
  next();
});
app.use(
  rateLimit({
    windowMs: 2000,
    limit: 10,
    standardHeaders: mode,
    legacyHeaders: false,
  }),
);
app.use((_req, res) => res.send("ok\n"));

const server = app.listen(Number(port), "127.0.0.1", () =>
  console.error(`express-rate-limit ${mode} on 127.0.0.1:${port}`),
);
server.keepAliveTimeout = 60000;
process.on("SIGTERM", () => server.close(() => process.exit(0)));
