# metaledger node image: `docker build -t metaledger .`
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY protos protos
COPY rmq rmq
COPY raftlog raftlog
COPY snapshots snapshots
COPY nameserver nameserver
COPY broker broker
COPY replicator replicator
RUN pip install --no-cache-dir .
EXPOSE 9876 9877 9878 9879 10911 10912 10913
VOLUME ["/data"]
ENTRYPOINT ["metaledger"]
# serve refuses to start without a Raft peer password (loopback included):
# docker run -e METALEDGER_CLUSTER_PASSWORD="$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')" metaledger
CMD ["serve", "--id", "n0", "--data-dir", "/data", "--listen-client", "0.0.0.0:9877", "--listen-peer", "127.0.0.1:9878"]
