'use strict'
// kafkajs group consumer (JoinGroup/SyncGroup/Heartbeat/OffsetCommit...): spec {brokers, topic,
// groupId, expected, timeoutMs}. Result: every record read, bytes as base64.
const { makeKafka, main, toB64 } = require('./common')

main(async spec => {
  const consumer = makeKafka(spec).consumer({
    groupId: spec.groupId, sessionTimeout: 10000, rebalanceTimeout: 10000, maxWaitTimeInMs: 100
  })
  const records = []
  let crashed = null
  consumer.on(consumer.events.CRASH, e => { crashed = e.payload.error })
  await consumer.connect()
  try {
    await consumer.subscribe({ topics: [spec.topic], fromBeginning: true })
    let resolveDone
    const done = new Promise(resolve => { resolveDone = resolve })
    await consumer.run({
      eachMessage: async ({ partition, message }) => {
        const headers = []
        for (const [name, value] of Object.entries(message.headers || {})) {
          for (const v of Array.isArray(value) ? value : [value]) headers.push([name, toB64(v)])
        }
        records.push({
          partition,
          offset: Number(message.offset),
          timestamp: Number(message.timestamp),
          key: toB64(message.key),
          value: toB64(message.value),
          headers
        })
        if (records.length >= spec.expected) resolveDone()
      }
    })
    const deadline = Date.now() + (spec.timeoutMs || 60000)
    while (records.length < spec.expected) {
      if (crashed) throw crashed
      if (Date.now() > deadline) {
        throw new Error(`read ${records.length}/${spec.expected} records before the deadline`)
      }
      await Promise.race([done, new Promise(resolve => setTimeout(resolve, 200))])
    }
  } finally {
    await consumer.disconnect()
  }
  return records
})
