"""Grant ACLs on the local broker, as a platform would (Strimzi's user operator, kafka-acls).

aiokafka's admin client has no ACL call, but its protocol module has CreateAcls; a super user
(the PLAINTEXT listener's ANONYMOUS principal on the local broker) sends one request per ACL
entry. Only for tests: production ACLs come from deploy/strimzi/kafka.yaml.
"""

from __future__ import annotations

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.protocol.admin import CreateAclsRequest

from services.runtime.kafka_acls import Acl, Op, Pattern, Resource

# Kafka's wire codes (org.apache.kafka.common.resource / acl).
_RESOURCE = {Resource.TOPIC: 2, Resource.GROUP: 3, Resource.CLUSTER: 4, Resource.TRANSACTIONAL_ID: 5}
_PATTERN = {Pattern.LITERAL: 3, Pattern.PREFIX: 4}
_OPERATION = {Op.READ: 3, Op.WRITE: 4, Op.DESCRIBE: 8, Op.IDEMPOTENT_WRITE: 12}
_ALLOW = 3


async def grant(bootstrap_servers: str, principal: str, acls: list[Acl]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers)
    await admin.start()
    try:
        for acl in acls:
            for op in acl.operations:
                request = CreateAclsRequest(_RESOURCE[acl.resource], acl.name, _PATTERN[acl.pattern], principal, "*",
                                            _OPERATION[op], _ALLOW)
                response = await admin._send_request(request)
                for code, message in response.creation_responses:
                    if code:
                        raise RuntimeError(f"CreateAcls {acl} {op} for {principal}: error {code} {message}")
    finally:
        await admin.close()
