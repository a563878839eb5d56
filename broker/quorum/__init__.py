"""Quorum write and role management of a broker replica (docs/broker.md).

    policy        RocketMQ 5's needAckNums and RocketMQ 4's sync/async replication: pure
                  functions, one table
    group         GroupView: the replica group as metaledger last answered it
    replication   QuorumReplication: the send path's Replication on a master replica
    role          RoleManager: register, heartbeat, follow master changes, fence
    isr           IsrKeeper: the master's SyncStateSet upkeep through AlterSyncStateSet

Wiring one replica (``broker/replica.py``)::

    roles = RoleManager(client, RoleSettings(cluster, broker_name, "ip:port"), hooks)
    repl = QuorumReplication(roles, QuorumSettings(BrokerRole.SYNC_MASTER),
                             lambda: store.log.end_offset)        # the send path's Replication
    keeper = IsrKeeper(client, roles, repl.confirm_offset)
    roles.start()

    hooks.become_master(view): epochs.append(view.master_epoch, end); ha = HAMaster(...);
                               await ha.start(); repl.attach(ha, end); keeper.start(ha, end)
    hooks.become_slave(view):  await keeper.stop(); repl.detach(); await ha.stop();
                               HAClient(store, epochs, roles.broker_id, master ip:port+1)
"""

from broker.quorum.group import GroupView
from broker.quorum.isr import IsrChange, IsrKeeper, IsrSettings
from broker.quorum.policy import BrokerRole, QuorumSettings, Rule
from broker.quorum.replication import HAMasterLike, QuorumAdmission, QuorumReplication
from broker.quorum.role import Role, RoleHooks, RoleManager, RoleSettings

__all__ = [
    "BrokerRole",
    "GroupView",
    "HAMasterLike",
    "IsrChange",
    "IsrKeeper",
    "IsrSettings",
    "QuorumAdmission",
    "QuorumReplication",
    "QuorumSettings",
    "Role",
    "RoleHooks",
    "RoleManager",
    "RoleSettings",
    "Rule",
]
