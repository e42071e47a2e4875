'use strict'
// kafkajs admin partition reassignment: alterPartitionReassignments(spec.moves) -> poll
// listPartitionReassignments until nothing moves -> fetchTopicMetadata; then a reassignment onto
// a broker that does not exist (its error is returned). spec {brokers, topic, moves:[{partition,
// replicas}], badBroker}.
const { makeKafka, main } = require('./common')

main(async spec => {
  const admin = makeKafka(spec).admin()
  await admin.connect()
  try {
    await admin.alterPartitionReassignments({
      topics: [{ topic: spec.topic, partitionAssignment: spec.moves }],
      timeout: 10000
    })
    const listed = []
    const deadline = Date.now() + 60000
    for (;;) {
      const ongoing = await admin.listPartitionReassignments({ topics: null, timeout: 10000 })
      listed.push(ongoing)
      if (ongoing.topics.length === 0 || Date.now() > deadline) break
      await new Promise(resolve => setTimeout(resolve, 250))
    }
    const metadata = await admin.fetchTopicMetadata({ topics: [spec.topic] })
    let refused = null
    try {
      await admin.alterPartitionReassignments({
        topics: [{ topic: spec.topic, partitionAssignment: [{ partition: 0, replicas: [spec.badBroker] }] }],
        timeout: 10000
      })
    } catch (e) {
      refused = { name: e.name, type: e.type, message: e.message, errors: (e.errors || []).map(x => ({ type: x.type, message: x.message })) }
    }
    return { listed, metadata, refused }
  } finally {
    await admin.disconnect()
  }
})
