package org.elasticctr.hdfs;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.net.ServerSocket;
import java.util.concurrent.CountDownLatch;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.DFSConfigKeys;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.util.VersionInfo;
import sun.misc.Signal;

/**
 * A single-node HDFS (one NameNode, N DataNodes) on loopback for tests: MiniDFSCluster from
 * the pinned hadoop-minicluster jars.
 *
 * <p>With {@code --advertise HOST} (an address of this machine, e.g. the node IP of the test
 * Kubernetes cluster) it serves other network namespaces too: every server binds all
 * interfaces, the DataNodes register with the NameNode through HOST (the NameNode hands out
 * the address a DataNode registered from, so clients in pods get HOST, never 127.0.0.1) and
 * the READY line's URL names HOST.
 *
 * <p>Prints exactly one line starting with {@code MINIHDFS READY} on stdout once the cluster
 * answers, carrying the real ports (ask for port 0 to get free ones). Stops cleanly on SIGTERM
 * / SIGINT, and, with {@code --exit-on-stdin-close}, when its parent closes our stdin or dies,
 * so a test run that crashes leaves no java process behind. All logging goes to stderr.
 *
 * <p>Usage: {@code MiniHdfs [--nn-port N] [--http-port N] [--base-dir DIR] [--datanodes N]
 * [--advertise HOST] [--exit-on-stdin-close] [--exit-when-ready] | --version}
 */
public final class MiniHdfs {
  private MiniHdfs() {}

  private static void usage(String problem) {
    System.err.println("minihdfs: " + problem);
    System.err.println(
        "usage: minihdfs [--nn-port N] [--http-port N] [--base-dir DIR] [--datanodes N]"
            + " [--advertise HOST] [--exit-on-stdin-close] [--exit-when-ready] | --version");
    System.exit(2);
  }

  private static int port(String flag, String value) {
    try {
      int port = Integer.parseInt(value);
      if (port < 0 || port > 65535) {
        usage(flag + " must be 0..65535, got " + value);
      }
      return port;
    } catch (NumberFormatException e) {
      usage(flag + " must be a number, got " + value);
      return -1;
    }
  }

  /** A free port of this machine (the service RPC address needs a real one before start). */
  private static int freePort() throws IOException {
    try (ServerSocket socket = new ServerSocket(0)) {
      return socket.getLocalPort();
    }
  }

  public static void main(String[] args) throws Exception {
    int nnPort = 0;
    int httpPort = 0;
    int dataNodes = 1;
    String baseDir = null;
    String advertise = null;
    boolean exitOnStdinClose = false;
    boolean exitWhenReady = false; // one start/stop cycle (bootstrap records the CDS archive)
    for (int i = 0; i < args.length; i++) {
      String arg = args[i];
      switch (arg) {
        case "--version":
          System.out.println("hadoop " + VersionInfo.getVersion() + " MiniDFSCluster");
          return;
        case "--exit-on-stdin-close":
          exitOnStdinClose = true;
          continue;
        case "--exit-when-ready":
          exitWhenReady = true;
          continue;
        default:
          break;
      }
      if (i + 1 >= args.length) {
        usage("missing value after " + arg);
      }
      String value = args[++i];
      switch (arg) {
        case "--nn-port" -> nnPort = port(arg, value);
        case "--http-port" -> httpPort = port(arg, value);
        case "--base-dir" -> baseDir = value;
        case "--advertise" -> advertise = value;
        case "--datanodes" -> {
          dataNodes = port(arg, value);
          if (dataNodes < 1 || dataNodes > 9) {
            usage("--datanodes must be 1..9, got " + value);
          }
        }
        default -> usage("unknown option " + arg);
      }
    }
    if (baseDir == null) {
      baseDir = new File(System.getProperty("java.io.tmpdir"), "minihdfs-" + ProcessHandle.current().pid())
          .getPath();
    }

    Configuration conf = new Configuration();
    // Small: the machine is shared, tests run several processes at once.
    String bind = advertise == null ? "127.0.0.1" : "0.0.0.0";
    conf.set(DFSConfigKeys.DFS_NAMENODE_RPC_BIND_HOST_KEY, bind);
    conf.set(DFSConfigKeys.DFS_NAMENODE_HTTP_BIND_HOST_KEY, bind);
    if (advertise != null) {
      // MiniDFSCluster names the NameNode 127.0.0.1 for its own clients; the DataNodes reach
      // it through a service RPC address on HOST instead, so the NameNode records HOST (the
      // peer address of the registration) as each DataNode's address.
      conf.set(DFSConfigKeys.DFS_NAMENODE_SERVICE_RPC_BIND_HOST_KEY, bind);
      conf.set(DFSConfigKeys.DFS_NAMENODE_SERVICE_RPC_ADDRESS_KEY, advertise + ":" + freePort());
      conf.set(DFSConfigKeys.DFS_DATANODE_ADDRESS_KEY, "0.0.0.0:0");
      conf.set(DFSConfigKeys.DFS_DATANODE_HTTP_ADDRESS_KEY, "0.0.0.0:0");
      conf.set(DFSConfigKeys.DFS_DATANODE_IPC_ADDRESS_KEY, "0.0.0.0:0");
    }
    conf.setInt(DFSConfigKeys.DFS_NAMENODE_HANDLER_COUNT_KEY, 4);
    conf.setInt(DFSConfigKeys.DFS_NAMENODE_SERVICE_HANDLER_COUNT_KEY, 2);
    conf.setInt(DFSConfigKeys.DFS_DATANODE_HANDLER_COUNT_KEY, 2);
    conf.setInt(DFSConfigKeys.DFS_REPLICATION_KEY, Math.min(dataNodes, 3));
    conf.setBoolean(DFSConfigKeys.DFS_PERMISSIONS_ENABLED_KEY, true);
    // Blocks of 1 MiB (the smallest allowed): a few-MiB test file spans several blocks.
    conf.setLong(DFSConfigKeys.DFS_BLOCK_SIZE_KEY, 1L << 20);
    // No periodic block scanning: it only costs CPU on a short-lived test cluster.
    conf.setLong(DFSConfigKeys.DFS_DATANODE_SCAN_PERIOD_HOURS_KEY, -1);

    File base = new File(baseDir);
    MiniDFSCluster cluster =
        new MiniDFSCluster.Builder(conf, base)
            .nameNodePort(nnPort)
            .nameNodeHttpPort(httpPort)
            .numDataNodes(dataNodes)
            .format(true)
            .checkDataNodeAddrConfig(advertise != null)
            .build();
    cluster.waitActive();
    cluster.waitClusterUp();

    // Stop on SIGTERM/SIGINT through signal handlers, not a JVM shutdown hook: Hadoop's own
    // hooks refuse changes once JVM shutdown has begun, so MiniDFSCluster.shutdown() inside a
    // hook throws. The main thread does the shutdown and then exits.
    CountDownLatch stopRequested = new CountDownLatch(1);
    for (String name : new String[] {"TERM", "INT", "HUP"}) {
      Signal.handle(new Signal(name), signal -> stopRequested.countDown());
    }
    int rpc = cluster.getNameNodePort();
    int http = cluster.getNameNode().getHttpAddress().getPort();
    System.out.println(
        "MINIHDFS READY url=hdfs://" + (advertise == null ? "127.0.0.1" : advertise) + ":" + rpc + " nn-port=" + rpc + " http-port=" + http
            + " datanodes=" + dataNodes + " base-dir=" + base.getAbsolutePath()
            + " hadoop=" + VersionInfo.getVersion());
    System.out.flush();

    if (exitWhenReady) {
      stopRequested.countDown();
    }
    if (exitOnStdinClose) {
      Thread watcher =
          new Thread(
              () -> {
                try (InputStream in = System.in) {
                  byte[] buffer = new byte[256];
                  while (in.read(buffer) >= 0) {
                    // Anything written to us is ignored; only end-of-file matters.
                  }
                } catch (IOException e) {
                  // A broken pipe means the parent is gone: stop as for end-of-file.
                }
                stopRequested.countDown();
              },
              "minihdfs-stdin");
      watcher.setDaemon(true);
      watcher.start();
    }
    stopRequested.await();
    System.err.println("minihdfs: shutting down");
    long started = System.nanoTime();
    int status = 0;
    try {
      cluster.shutdown(true);
    } catch (RuntimeException e) {
      System.err.println("minihdfs: shutdown failed: " + e);
      status = 1;
    }
    System.err.printf("minihdfs: stopped in %.1f s%n", (System.nanoTime() - started) / 1e9);
    System.exit(status);
  }
}
