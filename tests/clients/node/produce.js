'use strict'
// Idempotent kafkajs producer: spec {brokers, topic, compression: 'none'|'gzip', chunk,
// messages: [{partition, key, value, headers: [[name, value]], timestamp}]} (bytes as base64).
// Result: the RecordMetadata of every send, in order.
const { CompressionTypes } = require('kafkajs')
const { makeKafka, main, b64 } = require('./common')

const CODECS = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP }

function headersObject (pairs) {
  // kafkajs takes headers as an object; repeated names become arrays. Only adjacent repeats
  // keep their wire order, so refuse anything else instead of silently reordering.
  const out = {}
  let last = null
  for (const [name, value] of pairs) {
    const v = b64(value)
    if (name in out) {
      if (name !== last) throw new Error(`header ${name} repeats non-adjacently`)
      out[name] = Array.isArray(out[name]) ? [...out[name], v] : [out[name], v]
    } else {
      out[name] = v
    }
    last = name
  }
  return out
}

main(async spec => {
  if (!(spec.compression in CODECS)) throw new Error(`codec ${spec.compression} unsupported`)
  const producer = makeKafka(spec).producer({ idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  const results = []
  try {
    const chunk = spec.chunk || 500
    for (let i = 0; i < spec.messages.length; i += chunk) {
      const messages = spec.messages.slice(i, i + chunk).map(m => ({
        partition: m.partition,
        key: b64(m.key),
        value: b64(m.value),
        headers: headersObject(m.headers),
        timestamp: String(m.timestamp)
      }))
      const meta = await producer.send({
        topic: spec.topic, acks: -1, timeout: 30000, compression: CODECS[spec.compression], messages
      })
      results.push(meta)
    }
  } finally {
    await producer.disconnect()
  }
  return results
})
