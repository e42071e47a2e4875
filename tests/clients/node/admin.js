'use strict'
// kafkajs admin: create (3 partitions, with a config) -> fetchTopicMetadata -> listTopics ->
// 5 records to partition 0 -> deleteTopicRecords up to offset 3 -> fetchTopicOffsets ->
// deleteTopics -> listTopics. spec {brokers, topic, replicationFactor}.
const { makeKafka, main } = require('./common')

main(async spec => {
  const admin = makeKafka(spec).admin()
  await admin.connect()
  try {
    const created = await admin.createTopics({
      topics: [{
        topic: spec.topic,
        numPartitions: 3,
        replicationFactor: spec.replicationFactor,
        configEntries: [{ name: 'retention.ms', value: '3600000' }]
      }],
      waitForLeaders: true
    })
    const createdAgain = await admin.createTopics({
      topics: [{ topic: spec.topic, numPartitions: 3, replicationFactor: spec.replicationFactor }]
    })
    const metadata = await admin.fetchTopicMetadata({ topics: [spec.topic] })
    const listedBefore = await admin.listTopics()
    const producer = makeKafka(spec).producer()
    await producer.connect()
    try {
      await producer.send({
        topic: spec.topic,
        messages: [0, 1, 2, 3, 4].map(i => ({ partition: 0, value: `v${i}` }))
      })
    } finally {
      await producer.disconnect()
    }
    await admin.deleteTopicRecords({ topic: spec.topic, partitions: [{ partition: 0, offset: '3' }] })
    const offsetsAfterDelete = await admin.fetchTopicOffsets(spec.topic)
    await admin.deleteTopics({ topics: [spec.topic], timeout: 10000 })
    let listedAfter = await admin.listTopics()
    const deadline = Date.now() + 15000
    while (listedAfter.includes(spec.topic) && Date.now() < deadline) {
      await new Promise(resolve => setTimeout(resolve, 200))
      listedAfter = await admin.listTopics()
    }
    return { created, createdAgain, metadata, listedBefore, offsetsAfterDelete, listedAfter }
  } finally {
    await admin.disconnect()
  }
})
