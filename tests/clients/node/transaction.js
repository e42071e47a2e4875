'use strict'
// kafkajs transactional producer (producer.transaction(), sendOffsets): spec {brokers,
// transactionalId, groupId, topic, transactions: [{commit, messages: [{partition, value}],
// offsets: [{topic, partition, offset}]}]} (values as base64). Each transaction sends its
// messages, then its offsets for groupId (AddOffsetsToTxn + TxnOffsetCommit), then commits or
// aborts. Result: per transaction, the RecordMetadata of its sends.
const { makeKafka, main, b64 } = require('./common')

function offsetTopics (offsets) {
  const byTopic = new Map()
  for (const { topic, partition, offset } of offsets) {
    if (!byTopic.has(topic)) byTopic.set(topic, [])
    byTopic.get(topic).push({ partition, offset: String(offset) })
  }
  return [...byTopic].map(([topic, partitions]) => ({ topic, partitions }))
}

main(async spec => {
  const producer = makeKafka(spec).producer({
    transactionalId: spec.transactionalId, idempotent: true, maxInFlightRequests: 1
  })
  await producer.connect()
  const results = []
  try {
    for (const txn of spec.transactions) {
      const transaction = await producer.transaction()
      try {
        const meta = await transaction.send({
          topic: spec.topic,
          acks: -1,
          messages: txn.messages.map(m => ({ partition: m.partition, value: b64(m.value) }))
        })
        await transaction.sendOffsets({
          consumerGroupId: spec.groupId, topics: offsetTopics(txn.offsets)
        })
        if (txn.commit) await transaction.commit()
        else await transaction.abort()
        results.push(meta)
      } catch (e) {
        if (transaction.isActive()) await transaction.abort()
        throw e
      }
    }
  } finally {
    await producer.disconnect()
  }
  return results
})
