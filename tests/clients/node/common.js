'use strict'
// Shared set-up for the kafkajs scripts the integration tests run: argument/JSON file
// handling and a logger that writes to stderr (stdout stays free for results).
const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')

process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'

function readSpec () {
  const [specPath, outPath] = process.argv.slice(2)
  if (!specPath || !outPath) {
    throw new Error(`usage: node ${process.argv[1]} <spec.json> <out.json>`)
  }
  return { spec: JSON.parse(fs.readFileSync(specPath, 'utf8')), outPath }
}

const stderrLogCreator = () => ({ namespace, level, label, log }) => {
  const { message, ...extra } = log
  process.stderr.write(`[kafkajs ${label} ${namespace}] ${message} ${JSON.stringify(extra)}\n`)
}

function makeKafka (spec) {
  return new Kafka({
    clientId: spec.clientId || 'kafka-py-itest',
    brokers: spec.brokers,
    logLevel: spec.debug ? logLevel.DEBUG : logLevel.WARN,
    logCreator: stderrLogCreator,
    // spec.retries: fewer for connections that are expected to be refused
    retry: { retries: spec.retries ?? 5, initialRetryTime: 100 },
    connectionTimeout: 5000,
    requestTimeout: 30000,
    ssl: tlsOptions(spec.ssl),
    // kafkajs's sasl option as is ({mechanism: 'plain'|'scram-sha-256'|'scram-sha-512', ...})
    sasl: spec.sasl || undefined
  })
}

// spec.ssl: {ca: <PEM file>, cert?: <PEM file>, key?: <PEM file>} (TLS listener; cert and key
// make a client certificate for listeners with ssl.client.auth=required)
function tlsOptions (ssl) {
  if (!ssl) return undefined
  const read = path => fs.readFileSync(path, 'utf8')
  const opts = { ca: [read(ssl.ca)] }
  if (ssl.cert) opts.cert = read(ssl.cert)
  if (ssl.key) opts.key = read(ssl.key)
  return opts
}

const b64 = v => (v === null || v === undefined ? null : Buffer.from(v, 'base64'))
const toB64 = v => (v === null || v === undefined ? null : Buffer.from(v).toString('base64'))

async function main (fn) {
  const { spec, outPath } = readSpec()
  try {
    const result = await fn(spec)
    fs.writeFileSync(outPath, JSON.stringify({ ok: true, result }))
    process.exit(0)
  } catch (e) {
    fs.writeFileSync(outPath, JSON.stringify({
      ok: false, error: { name: e.name, message: e.message, type: e.type, code: e.code, stack: e.stack }
    }))
    process.stderr.write(`${e.stack}\n`)
    process.exit(1)
  }
}

module.exports = { makeKafka, main, b64, toB64 }
